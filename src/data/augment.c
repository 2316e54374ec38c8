/*
 * Training augmentation (vit/augment.h).  Random affine transforms:
 * rotation, zoom and translation about the image centre, sampled
 * bilinearly (digits written by other people differ from the training
 * writers mostly by such small deformations); whole-pixel shifts and flips;
 * random erasing; colour changes (jitter, gray, channel order, inversion);
 * and the batch mixing of mixup and cutmix.
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

/* ---- colour ---- */

static const int channel_perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                        {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};

/* RGB -> YIQ (NTSC, FCC); its rows I and Q sum to 0, so gray stays gray. */
static const double yiq[3][3] = {{VIT_LUMA_R, VIT_LUMA_G, VIT_LUMA_B},
                                 {0.595716, -0.274453, -0.321263},
                                 {0.211456, -0.522591, 0.311135}};

static vit_real clamp01(double v) { return (vit_real)(v < 0 ? 0 : v > 1 ? 1 : v); }

/* The gray of pixel p [C]: luma for 3 channels, the channel mean else. */
static double pixel_gray(const vit_real *p, int C)
{
    if (C == 3)
        return VIT_LUMA_R * p[0] + VIT_LUMA_G * p[1] + VIT_LUMA_B * p[2];
    double s = 0;
    for (int c = 0; c < C; c++)
        s += p[c];
    return s / C;
}

/* m [3][3] = the RGB matrix of a hue turn t: yiq^-1 R(2 pi t) yiq, the
 * inverse by cofactors over the determinant. */
static void hue_matrix(double t, double m[3][3])
{
    const double (*a)[3] = yiq;
    double inv[3][3], det = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            int r0 = (j + 1) % 3, r1 = (j + 2) % 3, c0 = (i + 1) % 3, c1 = (i + 2) % 3;
            inv[i][j] = a[r0][c0] * a[r1][c1] - a[r0][c1] * a[r1][c0];
        }
    for (int k = 0; k < 3; k++)
        det += a[0][k] * inv[k][0];
    double co = cos(2 * 3.14159265358979323846 * t), si = sin(2 * 3.14159265358979323846 * t);
    double rot[3][3] = {{1, 0, 0}, {0, co, -si}, {0, si, co}}, ra[3][3];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            ra[i][j] = rot[i][0] * a[0][j] + rot[i][1] * a[1][j] + rot[i][2] * a[2][j];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            m[i][j] = (inv[i][0] * ra[0][j] + inv[i][1] * ra[1][j] + inv[i][2] * ra[2][j]) / det;
}

static int check_colour(const vit_colour *c, int C)
{
    int colour = c->saturation != 1 || c->hue != 0 || c->gray || c->perm;
    if (!(c->brightness >= 0 && c->brightness < 1e6) || !(c->contrast >= 0 && c->contrast < 1e6)
        || !(c->saturation >= 0 && c->saturation < 1e6) || !(c->hue >= -0.5 && c->hue <= 0.5)
        || c->perm < 0 || c->perm > 5 || (c->gray != 0 && c->gray != 1)
        || (c->invert != 0 && c->invert != 1))
        return vit_fail(VIT_EINVAL, "vit_colour_apply: a value is out of range (brightness %g, "
                        "contrast %g, saturation %g, hue %g, gray %d, perm %d, invert %d)",
                        c->brightness, c->contrast, c->saturation, c->hue, c->gray, c->perm,
                        c->invert);
    if (colour && C != 3)
        return vit_fail(VIT_EINVAL, "vit_colour_apply: saturation, hue, gray and perm need 3 "
                        "channels, not %d", C);
    return VIT_OK;
}

/* x [H, W, C] in place, the steps in vit/augment.h's order. */
int vit_colour_apply(vit_real *x, int H, int W, int C, const vit_colour *c)
{
    if (!x || !c)
        return vit_fail(VIT_EINVAL, "vit_colour_apply: %s is NULL", !x ? "x" : "c");
    if (H <= 0 || W <= 0 || C <= 0)
        return vit_fail(VIT_EINVAL, "vit_colour_apply: size %dx%dx%d invalid", H, W, C);
    int rc = check_colour(c, C);
    if (rc)
        return rc;
    size_t n = (size_t)H * W, len = n * C;
    if (c->brightness != 1)
        for (size_t i = 0; i < len; i++)
            x[i] = clamp01(c->brightness * x[i]);
    if (c->contrast != 1) {
        double m = 0;
        for (size_t p = 0; p < n; p++)
            m += pixel_gray(x + p * C, C);
        m /= (double)n;
        for (size_t i = 0; i < len; i++)
            x[i] = clamp01(c->contrast * x[i] + (1 - c->contrast) * m);
    }
    if (c->saturation != 1)
        for (size_t p = 0; p < n; p++) {
            vit_real *q = x + p * 3;
            double g = pixel_gray(q, 3);
            for (int k = 0; k < 3; k++)
                q[k] = clamp01(c->saturation * q[k] + (1 - c->saturation) * g);
        }
    if (c->hue != 0) {
        double m[3][3];
        hue_matrix(c->hue, m);
        for (size_t p = 0; p < n; p++) {
            vit_real *q = x + p * 3;
            double r = q[0], g = q[1], b = q[2];
            for (int k = 0; k < 3; k++)
                q[k] = clamp01(m[k][0] * r + m[k][1] * g + m[k][2] * b);
        }
    }
    if (c->gray)
        for (size_t p = 0; p < n; p++) {
            vit_real *q = x + p * 3;
            q[0] = q[1] = q[2] = clamp01(pixel_gray(q, 3));
        }
    if (c->perm)
        for (size_t p = 0; p < n; p++) {
            vit_real *q = x + p * 3, v[3] = {q[0], q[1], q[2]};
            for (int k = 0; k < 3; k++)
                q[k] = v[channel_perms[c->perm][k]];
        }
    if (c->invert)
        for (size_t i = 0; i < len; i++)
            x[i] = clamp01(1.0 - x[i]);
    return VIT_OK;
}

static int colour_on(const vit_augment *g)
{
    return g->brightness > 0 || g->contrast > 0 || g->saturation > 0 || g->hue > 0
           || g->grayscale > 0 || g->channel_perm || g->invert;
}

static int check_colour_settings(const vit_augment *g, const char *who)
{
    if (!(g->brightness >= 0 && g->brightness <= 1) || !(g->contrast >= 0 && g->contrast <= 1)
        || !(g->saturation >= 0 && g->saturation <= 1) || !(g->hue >= 0 && g->hue <= 0.5)
        || !(g->grayscale >= 0 && g->grayscale <= 1) || (g->channel_perm != 0 && g->channel_perm != 1)
        || (g->invert != 0 && g->invert != 1))
        return vit_fail(VIT_EINVAL, "%s: a colour setting is out of range (brightness %g, "
                        "contrast %g, saturation %g, hue %g, grayscale %g, channel_perm %d, "
                        "invert %d)", who, g->brightness, g->contrast, g->saturation, g->hue,
                        g->grayscale, g->channel_perm, g->invert);
    return VIT_OK;
}

int vit_colour_draw(vit_colour *c, vit_rng *rng, const vit_augment *g)
{
    if (!c || !rng || !g)
        return vit_fail(VIT_EINVAL, "vit_colour_draw: %s is NULL", !c ? "c" : !rng ? "rng" : "g");
    int rc = check_colour_settings(g, "vit_colour_draw");
    if (rc)
        return rc;
    *c = (vit_colour){1, 1, 1, 0, 0, 0, 0};
    if (g->brightness > 0)
        c->brightness = 1 + g->brightness * (2 * vit_rng_uniform(rng) - 1);
    if (g->contrast > 0)
        c->contrast = 1 + g->contrast * (2 * vit_rng_uniform(rng) - 1);
    if (g->saturation > 0)
        c->saturation = 1 + g->saturation * (2 * vit_rng_uniform(rng) - 1);
    if (g->hue > 0)
        c->hue = g->hue * (2 * vit_rng_uniform(rng) - 1);
    if (g->grayscale > 0)
        c->gray = vit_rng_uniform(rng) < g->grayscale;
    if (g->channel_perm)
        c->perm = (int)vit_rng_below(rng, 6);
    if (g->invert)
        c->invert = vit_rng_uniform(rng) < 0.5;
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
    vit_colour colour;  /* the identity when no colour setting is on */
} item_draw;

/* An item's draws, in a fixed order: the affine (four) or the shift (two,
 * as before flips existed), then the flip (one, only with flip on), then
 * erasing (only with erase on: whether, the box, the noise's seed), then
 * the colour (vit_colour_draw's, only with a colour setting on). */
static void draw_item(const vit_augment *g, vit_rng *rng, int H, int W, item_draw *d)
{
    *d = (item_draw){.a = {0, 1, 0, 0}, .colour = {1, 1, 1, 0, 0, 0, 0}};
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
    if (colour_on(g))
        vit_colour_draw(&d->colour, rng, g);
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
 * changed in colour, then erased (if drawn); tmp [H, W, C] is scratch. */
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
    if (colour_on(g))
        vit_colour_apply(dst, H, W, C, &d->colour);
    if (d->erase)
        erase_box(dst, d, W, C);
}

static int check_augment(const vit_augment *g, int C)
{
    int rc = check_colour_settings(g, "vit_augment_batch");
    if (rc)
        return rc;
    if (C != 3 && (g->saturation > 0 || g->hue > 0 || g->grayscale > 0 || g->channel_perm))
        return vit_fail(VIT_EINVAL, "vit_augment_batch: saturation, hue, grayscale and "
                        "channel_perm need images of 3 channels, not %d", C);
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
    return check_augment(g, ds->channels);
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
