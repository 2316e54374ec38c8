/*
 * Training augmentation (vit/augment.h).  Random affine transforms:
 * rotation, zoom and translation about the image centre, sampled
 * bilinearly (digits written by other people differ from the training
 * writers mostly by such small deformations); whole-pixel shifts and flips;
 * random erasing; and the batch mixing of mixup and cutmix.
 */
#include "vit/augment.h"

#include <math.h>
#include <stdlib.h>
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

/* dst [H, W, C]: column x reads column W-1-x. */
int vit_flip_horizontal(vit_real *dst, const vit_real *src, int H, int W, int C)
{
    if (!dst || !src)
        return vit_fail(VIT_EINVAL, "vit_flip_horizontal: %s is NULL", !dst ? "dst" : "src");
    if (H <= 0 || W <= 0 || C <= 0)
        return vit_fail(VIT_EINVAL, "vit_flip_horizontal: size %dx%dx%d invalid", H, W, C);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            memcpy(dst + ((size_t)y * W + x) * C, src + ((size_t)y * W + (W - 1 - x)) * C,
                   (size_t)C * sizeof *dst);
    return VIT_OK;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

double vit_cutmix_box(int box[4], int H, int W, double lam, double uy, double ux)
{
    if (!box || H < 1 || W < 1 || !(lam >= 0 && lam <= 1) || !(uy >= 0 && uy < 1)
        || !(ux >= 0 && ux < 1)) {
        vit_fail(VIT_EINVAL, "vit_cutmix_box: %s", !box ? "box is NULL"
                 : H < 1 || W < 1 ? "size below 1" : "lam, uy or ux out of range");
        return -1;
    }
    double cut = sqrt(1 - lam);
    int ch = (int)(H * cut), cw = (int)(W * cut);
    int cy = (int)(uy * H), cx = (int)(ux * W);
    box[0] = clampi(cy - ch / 2, 0, H);
    box[1] = clampi(cx - cw / 2, 0, W);
    box[2] = clampi(cy + ch / 2, 0, H);
    box[3] = clampi(cx + cw / 2, 0, W);
    return 1 - (double)(box[2] - box[0]) * (box[3] - box[1]) / ((double)H * W);
}

int vit_erase_box(int box[4], int H, int W, vit_rng *rng)
{
    if (!box || !rng || H < 1 || W < 1) {
        vit_fail(VIT_EINVAL, "vit_erase_box: %s", !box ? "box is NULL" : !rng ? "rng is NULL"
                 : "size below 1");
        return -1;
    }
    box[0] = box[1] = box[2] = box[3] = 0;
    const double lo = log(VIT_ERASE_MIN_ASPECT), hi = -lo;
    for (int t = 0; t < VIT_ERASE_TRIES; t++) {
        double share = VIT_ERASE_MIN_AREA
                       + (VIT_ERASE_MAX_AREA - VIT_ERASE_MIN_AREA) * vit_rng_uniform(rng);
        double area = share * H * W, aspect = exp(lo + (hi - lo) * vit_rng_uniform(rng));
        int h = (int)(sqrt(area * aspect) + 0.5), w = (int)(sqrt(area / aspect) + 0.5);
        if (h < 1 || w < 1 || h >= H || w >= W)
            continue;
        box[0] = (int)vit_rng_below(rng, (uint32_t)(H - h + 1));
        box[1] = (int)vit_rng_below(rng, (uint32_t)(W - w + 1));
        box[2] = box[0] + h;
        box[3] = box[1] + w;
        return 1;
    }
    return 0;
}

/* Gamma(a, 1) by Marsaglia and Tsang (a < 1 through Gamma(a + 1) U^(1/a)). */
static double gamma_draw(vit_rng *rng, double a)
{
    double boost = 1;
    if (a < 1) {
        double u = vit_rng_uniform(rng);
        boost = pow(u > 0 ? u : 0x1p-53, 1 / a);
        a += 1;
    }
    double d = a - 1.0 / 3, c = 1 / sqrt(9 * d);
    for (;;) {
        double x = vit_rng_normal(rng), v = 1 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = vit_rng_uniform(rng);
        if (u < 1 - 0.0331 * x * x * x * x || log(u > 0 ? u : 0x1p-53) < 0.5 * x * x + d * (1 - v + log(v)))
            return boost * d * v;
    }
}

/* Beta(a, a) from two gamma draws. */
static double beta_draw(vit_rng *rng, double a)
{
    double x = gamma_draw(rng, a), y = gamma_draw(rng, a);
    return x + y > 0 ? x / (x + y) : 0.5;
}

/* One item's draws. */
typedef struct item_draw {
    vit_affine a;
    int dy, dx, flip;
    int erase, ebox[4]; /* erase: 1 if ebox is filled with noise */
    uint64_t noise;     /* the seed of that noise */
} item_draw;

/* An item's draws, in a fixed order: the affine (four) or the shift (two,
 * as before flips existed), then the flip (one, only with flip on), then
 * erasing (only with erase on: whether, the box, the noise's seed). */
static void draw_item(const vit_augment *g, vit_rng *rng, int H, int W, item_draw *d)
{
    *d = (item_draw){.a = {0, 1, 0, 0}};
    if (g->rotate > 0 || g->scale > 0)
        vit_affine_draw(&d->a, rng, g->rotate, g->scale, g->shift);
    else if (g->shift > 0) {
        d->dy = (int)vit_rng_below(rng, (uint32_t)(2 * g->shift + 1)) - g->shift;
        d->dx = (int)vit_rng_below(rng, (uint32_t)(2 * g->shift + 1)) - g->shift;
    }
    if (g->flip)
        d->flip = vit_rng_uniform(rng) < 0.5;
    if (g->erase > 0 && vit_rng_uniform(rng) < g->erase
        && vit_erase_box(d->ebox, H, W, rng) == 1) {
        d->erase = 1;
        d->noise = vit_rng_next(rng);
    }
}

/* x [H, W, C]: the box's pixels, every channel, uniform in [0, 1) from a
 * generator of their own, so that an item's erasing is remade exactly
 * when it is drawn again as a mixing partner. */
static void erase_box(vit_real *x, const item_draw *d, int W, int C)
{
    vit_rng r;
    vit_rng_seed(&r, d->noise);
    for (int y = d->ebox[0]; y < d->ebox[2]; y++) {
        vit_real *row = x + ((size_t)y * W + d->ebox[1]) * C;
        for (int i = 0; i < (d->ebox[3] - d->ebox[1]) * C; i++)
            row[i] = (vit_real)vit_rng_uniform(&r);
    }
}

/* dst [H, W, C] = src flipped (if drawn), then warped or translated, then
 * erased (if drawn); tmp [H, W, C] is scratch. */
static void apply_item(const vit_augment *g, const item_draw *d, const vit_real *src,
                       vit_real *dst, vit_real *tmp, int H, int W, int C)
{
    size_t img = (size_t)H * W * C;
    if (d->flip) {
        vit_flip_horizontal(tmp, src, H, W, C);
        src = tmp;
    }
    if (g->rotate > 0 || g->scale > 0)
        vit_affine_apply(dst, src, H, W, C, &d->a);
    else if (g->shift > 0)
        vit_translate(dst, src, H, W, C, d->dy, d->dx);
    else
        memcpy(dst, src, img * sizeof *dst);
    if (d->erase)
        erase_box(dst, d, W, C);
}

static int check_augment(const vit_augment *g)
{
    if (!(g->shift >= 0 && g->shift <= 4096) || !(g->rotate >= 0 && g->rotate < 1e6)
        || !(g->scale >= 0 && g->scale < 1) || (g->flip != 0 && g->flip != 1)
        || !(g->mixup >= 0 && g->mixup <= 1e6) || !(g->cutmix >= 0 && g->cutmix <= 1e6)
        || !(g->mix_prob >= 0 && g->mix_prob <= 1) || !(g->smoothing >= 0 && g->smoothing < 1)
        || !(g->erase >= 0 && g->erase <= 1) || g->classes < 1)
        return vit_fail(VIT_EINVAL, "vit_augment_batch: a setting is out of range (shift %d, "
                        "rotate %g, scale %g, flip %d, erase %g, mixup %g, cutmix %g, "
                        "mix_prob %g, smoothing %g, classes %d)", g->shift, g->rotate, g->scale,
                        g->flip, g->erase, g->mixup, g->cutmix, g->mix_prob, g->smoothing,
                        g->classes);
    return VIT_OK;
}

/* The batch's mixing draws: whether, which, lam and the cutmix box. */
static int draw_mix(const vit_augment *g, vit_rng *rng, int H, int W, double *lam, int box[4])
{
    *lam = 1;
    if (g->mixup <= 0 && g->cutmix <= 0)
        return 0;
    int on = vit_rng_uniform(rng) < g->mix_prob;
    int cut = g->cutmix > 0;
    if (g->mixup > 0 && g->cutmix > 0)
        cut = vit_rng_uniform(rng) < 0.5;
    if (!on)
        return 0;
    double l = beta_draw(rng, cut ? g->cutmix : g->mixup);
    if (!cut) {
        *lam = l;
        return 1;
    }
    double uy = vit_rng_uniform(rng), ux = vit_rng_uniform(rng);
    *lam = vit_cutmix_box(box, H, W, l, uy, ux);
    return 2;
}

/* x [H, W, C] mixed with its partner xp: how 1 (mixup) lam x + (1 - lam)
 * xp; how 2 (cutmix) xp's pixels pasted into box. */
static void mix_pixels(int how, double lam, const int box[4], vit_real *x, const vit_real *xp,
                       int H, int W, int C)
{
    size_t img = (size_t)H * W * C;
    if (how == 1)
        for (size_t i = 0; i < img; i++)
            x[i] = (vit_real)(lam * x[i] + (1 - lam) * xp[i]);
    else
        for (int y = box[0]; y < box[2]; y++)
            memcpy(x + ((size_t)y * W + box[1]) * C, xp + ((size_t)y * W + box[1]) * C,
                   (size_t)(box[3] - box[1]) * C * sizeof *x);
}

/* t [classes] = lam t(ya) + (1 - lam) t(yb), each one-hot smoothed. */
static void mix_targets(const vit_augment *g, double lam, int ya, int yb, vit_real *t)
{
    int K = g->classes;
    double off = g->smoothing / K, on = 1 - g->smoothing + off;
    for (int c = 0; c < K; c++)
        t[c] = (vit_real)(lam * (c == ya ? on : off) + (1 - lam) * (c == yb ? on : off));
}

struct vit_augment_scratch {
    int batch, H, W, C;
    item_draw *d;   /* [batch]: mixing needs the partners' draws after all
                       draws are taken */
    vit_real *tmp;  /* [2, H, W, C]: a flipped item, a partner */
};

int vit_augment_scratch_new(vit_augment_scratch **out, int batch, int H, int W, int C)
{
    if (!out)
        return vit_fail(VIT_EINVAL, "vit_augment_scratch_new: out is NULL");
    *out = NULL;
    if (batch < 1 || H < 1 || W < 1 || C < 1)
        return vit_fail(VIT_EINVAL, "vit_augment_scratch_new: batch %d or size %dx%dx%d below 1",
                        batch, H, W, C);
    size_t bytes; /* of tmp, [2, H, W, C] */
    if (!vit_mul_size(&bytes, (size_t)H, (size_t)W) || !vit_mul_size(&bytes, bytes, (size_t)C)
        || !vit_mul_size(&bytes, bytes, 2 * sizeof(vit_real)))
        return VIT_ENOMEM;
    vit_augment_scratch *s = calloc(1, sizeof *s);
    if (s) {
        *s = (vit_augment_scratch){batch, H, W, C, malloc((size_t)batch * sizeof *s->d),
                                   malloc(bytes)};
        if (s->d && s->tmp) {
            *out = s;
            return VIT_OK;
        }
    }
    vit_augment_scratch_free(s);
    return vit_fail(VIT_ENOMEM, "vit_augment_scratch_new: out of memory");
}

void vit_augment_scratch_free(vit_augment_scratch *s)
{
    if (!s)
        return;
    free(s->d);
    free(s->tmp);
    free(s);
}

/* VIT_OK if the call's arguments hold (see vit_augment_batch). */
static int check_batch_args(const vit_augment *g, const vit_dataset *ds, const int *idx, int b,
                            int lo, int hi, const vit_augment_scratch *s, const vit_rng *rng)
{
    if (!g || !ds || !idx || !s || !rng)
        return vit_fail(VIT_EINVAL, "vit_augment_batch: NULL argument");
    if (!(0 <= lo && lo <= hi && hi <= b))
        return vit_fail(VIT_EINVAL, "vit_augment_batch: slice [%d, %d) of %d items", lo, hi, b);
    if (b > s->batch || ds->height != s->H || ds->width != s->W || ds->channels != s->C)
        return vit_fail(VIT_EINVAL, "vit_augment_batch: the scratch is for %d items of %dx%dx%d, "
                        "not %d of %dx%dx%d", s->batch, s->H, s->W, s->C, b, ds->height,
                        ds->width, ds->channels);
    return check_augment(g);
}

int vit_augment_batch(const vit_augment *g, const vit_dataset *ds, const int *idx, int b,
                      int lo, int hi, vit_augment_scratch *scratch, vit_rng *rng,
                      vit_real *images, int *labels, vit_real *targets, int *mixed,
                      double *lam_out)
{
    if (!images || !labels || !mixed)
        return vit_fail(VIT_EINVAL, "vit_augment_batch: NULL argument");
    int rc = check_batch_args(g, ds, idx, b, lo, hi, scratch, rng);
    if (rc)
        return rc;
    int H = ds->height, W = ds->width, C = ds->channels;
    size_t img = (size_t)H * W * C;
    int mixing = g->mixup > 0 || g->cutmix > 0;
    item_draw *d = scratch->d;
    vit_real *tmp = scratch->tmp;
    for (int k = 0; k < b; k++) {
        item_draw *dk = mixing ? &d[k] : d;
        draw_item(g, rng, H, W, dk);
        if (k < lo || k >= hi)
            continue;
        labels[k - lo] = ds->labels[idx[k]];
        apply_item(g, dk, ds->images + (size_t)idx[k] * img, images + (size_t)(k - lo) * img,
                   tmp, H, W, C);
    }
    int box[4] = {0, 0, 0, 0};
    double lam = 1;
    int how = mixing ? draw_mix(g, rng, H, W, &lam, box) : 0;
    *mixed = how != 0;
    if (lam_out)
        *lam_out = lam;
    for (int k = lo; how && k < hi; k++) {
        int p = b - 1 - k;
        vit_real *x = images + (size_t)(k - lo) * img, *xp = tmp + img;
        apply_item(g, &d[p], ds->images + (size_t)idx[p] * img, xp, tmp, H, W, C);
        mix_pixels(how, lam, box, x, xp, H, W, C);
        if (targets)
            mix_targets(g, lam, ds->labels[idx[k]], ds->labels[idx[p]],
                        targets + (size_t)(k - lo) * g->classes);
    }
    return VIT_OK;
}
