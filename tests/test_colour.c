/*
 * Colour augmentation (vit/augment.h: vit_colour_apply, vit_colour_draw,
 * their place in vit_augment_batch) and the recipe's colour test
 * (vit/recipe.h), against values computed here a second way: each step's
 * formula written out per pixel, the hue turn through YIQ and back by
 * Gaussian elimination (the library inverts by cofactors), and the recipe
 * on made-up sets whose colour does or does not carry the class; the
 * per-image standardisation (vit_image_norm, vit_config.image_norm)
 * against its closed form on images that are an affine map of one shape,
 * in the model's forward and through a checkpoint.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "file_util.h"
#include "vit/vit.h"

enum { H = 4, W = 5, N = H * W, IMG = N * 3 };

/* An image of distinct values spread over (0, 1), saturated pixels among
 * them (so the clamps bite), and one gray pixel (pixel 7). */
static void make_image(vit_real *x)
{
    for (int j = 0; j < IMG; j++)
        x[j] = (vit_real)fmod(0.137 * j + 0.05 * (j % 3) + 0.01, 1.0);
    x[0] = 1; x[1] = 0.95f; x[2] = 0.9f;
    x[21] = x[22] = x[23] = 0.4f;
}

static double luma(const double *p) { return 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]; }
static double cl(double v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

/* Solves a y = b (3x3) by Gaussian elimination with partial pivoting. */
static void solve3(const double a_in[3][3], const double b_in[3], double y[3])
{
    double a[3][4];
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++)
            a[i][j] = a_in[i][j];
        a[i][3] = b_in[i];
    }
    for (int c = 0; c < 3; c++) {
        int p = c;
        for (int i = c + 1; i < 3; i++)
            if (fabs(a[i][c]) > fabs(a[p][c]))
                p = i;
        for (int j = 0; j < 4; j++) {
            double t = a[c][j];
            a[c][j] = a[p][j];
            a[p][j] = t;
        }
        for (int i = c + 1; i < 3; i++) {
            double f = a[i][c] / a[c][c];
            for (int j = c; j < 4; j++)
                a[i][j] -= f * a[c][j];
        }
    }
    for (int i = 2; i >= 0; i--) {
        double s = a[i][3];
        for (int j = i + 1; j < 3; j++)
            s -= a[i][j] * y[j];
        y[i] = s / a[i][i];
    }
}

/* The expected image: x [N][3] in double, changed by c step by step. */
static void reference(double x[N][3], const vit_colour *c)
{
    static const double T[3][3] = {{0.299, 0.587, 0.114},
                                   {0.595716, -0.274453, -0.321263},
                                   {0.211456, -0.522591, 0.311135}};
    static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                    {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    if (c->brightness != 1)
        for (int p = 0; p < N; p++)
            for (int k = 0; k < 3; k++)
                x[p][k] = cl(c->brightness * x[p][k]);
    if (c->contrast != 1) {
        double m = 0;
        for (int p = 0; p < N; p++)
            m += luma(x[p]) / N;
        for (int p = 0; p < N; p++)
            for (int k = 0; k < 3; k++)
                x[p][k] = cl(c->contrast * x[p][k] + (1 - c->contrast) * m);
    }
    if (c->saturation != 1)
        for (int p = 0; p < N; p++) {
            double g = luma(x[p]);
            for (int k = 0; k < 3; k++)
                x[p][k] = cl(c->saturation * x[p][k] + (1 - c->saturation) * g);
        }
    if (c->hue != 0)
        for (int p = 0; p < N; p++) {
            double yiq[3] = {0, 0, 0}, out[3];
            for (int i = 0; i < 3; i++)
                for (int k = 0; k < 3; k++)
                    yiq[i] += T[i][k] * x[p][k];
            double th = 2 * 3.14159265358979323846 * c->hue, i0 = yiq[1], q0 = yiq[2];
            yiq[1] = cos(th) * i0 - sin(th) * q0;
            yiq[2] = sin(th) * i0 + cos(th) * q0;
            solve3(T, yiq, out);
            for (int k = 0; k < 3; k++)
                x[p][k] = cl(out[k]);
        }
    if (c->gray)
        for (int p = 0; p < N; p++)
            x[p][0] = x[p][1] = x[p][2] = luma(x[p]);
    if (c->perm) {
        for (int p = 0; p < N; p++) {
            double v[3] = {x[p][0], x[p][1], x[p][2]};
            for (int k = 0; k < 3; k++)
                x[p][k] = v[perms[c->perm][k]];
        }
    }
    if (c->invert)
        for (int p = 0; p < N; p++)
            for (int k = 0; k < 3; k++)
                x[p][k] = 1 - x[p][k];
}

/* vit_colour_apply on the test image against the reference; returns the
 * number of values the change moved by more than 1e-3 (so a case that
 * changes nothing is seen). */
static int check_case(const vit_colour *c, const char *name)
{
    vit_real x[IMG];
    double want[N][3];
    make_image(x);
    for (int p = 0; p < N; p++)
        for (int k = 0; k < 3; k++)
            want[p][k] = x[p * 3 + k];
    vit_real orig[IMG];
    memcpy(orig, x, sizeof x);
    reference(want, c);
    ck_assert_msg(vit_colour_apply(x, H, W, 3, c) == VIT_OK, "%s: %s", name, vit_last_error());
    int moved = 0;
    for (int p = 0; p < N; p++)
        for (int k = 0; k < 3; k++) {
            ck_assert_msg(fabs(x[p * 3 + k] - want[p][k]) < 2e-6, "%s: pixel %d channel %d: %.9g, "
                          "want %.9g", name, p, k, (double)x[p * 3 + k], want[p][k]);
            moved += fabs(x[p * 3 + k] - orig[p * 3 + k]) > 1e-3;
        }
    return moved;
}

START_TEST(test_colour_steps_exact)
{
    const struct { const char *name; vit_colour c; } cases[] = {
        {"brightness up", {1.3, 1, 1, 0, 0, 0, 0}},
        {"brightness down", {0.75, 1, 1, 0, 0, 0, 0}},
        {"contrast", {1, 0.6, 1, 0, 0, 0, 0}},
        {"contrast up", {1, 1.4, 1, 0, 0, 0, 0}},
        {"saturation", {1, 1, 0.3, 0, 0, 0, 0}},
        {"saturation up", {1, 1, 1.7, 0, 0, 0, 0}},
        {"hue", {1, 1, 1, 0.08, 0, 0, 0}},
        {"hue back", {1, 1, 1, -0.37, 0, 0, 0}},
        {"gray", {1, 1, 1, 0, 1, 0, 0}},
        {"invert", {1, 1, 1, 0, 0, 0, 1}},
        {"all", {1.2, 0.8, 1.3, 0.11, 0, 4, 1}},
        {"all gray", {0.9, 1.1, 0.7, -0.2, 1, 3, 0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(check_case(&cases[i].c, cases[i].name) > 0, "%s moved nothing",
                      cases[i].name);
    for (int p = 1; p < 6; p++) {
        vit_colour c = {1, 1, 1, 0, 0, p, 0};
        ck_assert(check_case(&c, "perm") > 0);
    }
    /* The identity changes nothing, bitwise. */
    vit_real x[IMG], y[IMG];
    make_image(x);
    memcpy(y, x, sizeof x);
    vit_colour id = {1, 1, 1, 0, 0, 0, 0};
    ck_assert_int_eq(vit_colour_apply(x, H, W, 3, &id), VIT_OK);
    ck_assert(memcmp(x, y, sizeof x) == 0);
}
END_TEST

/* The hue turn keeps a pixel's luma and its grayness, and half a turn
 * twice is the identity where nothing clamps. */
START_TEST(test_hue_keeps_luma)
{
    vit_real x[IMG];
    for (int j = 0; j < IMG; j++)
        x[j] = (vit_real)(0.45 + 0.1 * sin(j));
    x[3] = x[4] = x[5] = 0.5f;
    vit_real y[IMG];
    memcpy(y, x, sizeof x);
    vit_colour half = {1, 1, 1, 0.5, 0, 0, 0};
    ck_assert_int_eq(vit_colour_apply(y, H, W, 3, &half), VIT_OK);
    double before[3], after[3];
    for (int p = 0; p < N; p++) {
        for (int k = 0; k < 3; k++) {
            before[k] = x[p * 3 + k];
            after[k] = y[p * 3 + k];
        }
        ck_assert(fabs(luma(before) - luma(after)) < 1e-6);
    }
    for (int k = 3; k < 6; k++)
        ck_assert(fabs(y[k] - 0.5) < 1e-6);
    ck_assert(fabs(y[0] - x[0]) > 1e-3);
    ck_assert_int_eq(vit_colour_apply(y, H, W, 3, &half), VIT_OK);
    for (int j = 0; j < IMG; j++)
        ck_assert(fabs(y[j] - x[j]) < 1e-5);
}
END_TEST

START_TEST(test_colour_one_channel)
{
    /* brightness, contrast and invert on gray images: the mean of the
     * image is the contrast's centre */
    vit_real x[N], want[N];
    double m = 0;
    for (int j = 0; j < N; j++) {
        x[j] = (vit_real)(0.04 * j);
        m += 1.2 * x[j] / N;
    }
    for (int j = 0; j < N; j++)
        want[j] = (vit_real)(1 - cl(0.5 * cl(1.2 * x[j]) + 0.5 * m));
    vit_colour c = {1.2, 0.5, 1, 0, 0, 0, 1};
    ck_assert_int_eq(vit_colour_apply(x, H, W, 1, &c), VIT_OK);
    for (int j = 0; j < N; j++)
        ck_assert_msg(fabs(x[j] - want[j]) < 1e-6, "%d: %g want %g", j, x[j], want[j]);
    /* saturation, hue, gray and perm need 3 channels */
    vit_colour bad[4] = {{1, 1, 0.5, 0, 0, 0, 0}, {1, 1, 1, 0.1, 0, 0, 0},
                         {1, 1, 1, 0, 1, 0, 0}, {1, 1, 1, 0, 0, 2, 0}};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(vit_colour_apply(x, H, W, 1, &bad[i]), VIT_EINVAL);
        ck_assert_ptr_nonnull(strstr(vit_last_error(), "3 channels"));
    }
    vit_colour range[3] = {{-0.1, 1, 1, 0, 0, 0, 0}, {1, 1, 1, 0.6, 0, 0, 0},
                           {1, 1, 1, 0, 0, 6, 0}};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(vit_colour_apply(x, H, W, 3 - 2 * (i == 0), &range[i]), VIT_EINVAL);
    ck_assert_int_eq(vit_colour_apply(NULL, H, W, 3, &c), VIT_EINVAL);
}
END_TEST

/* vit_colour_draw takes one draw per setting that is on, in the header's
 * order, mapped as documented; nothing for settings that are off. */
START_TEST(test_colour_draw)
{
    vit_rng rng, copy;
    vit_rng_seed(&rng, 7);
    vit_colour c;
    vit_augment off = {.classes = 2};
    copy = rng;
    ck_assert_int_eq(vit_colour_draw(&c, &rng, &off), VIT_OK);
    ck_assert(memcmp(&rng, &copy, sizeof rng) == 0);
    ck_assert(c.brightness == 1 && c.contrast == 1 && c.saturation == 1 && c.hue == 0 && !c.gray
              && !c.perm && !c.invert);
    vit_augment g = {.brightness = 0.4, .contrast = 0.2, .saturation = 0.5, .hue = 0.1,
                     .grayscale = 0.3, .channel_perm = 1, .invert = 1, .classes = 2};
    int perms[6] = {0}, grays = 0, inverts = 0;
    for (int t = 0; t < 600; t++) {
        copy = rng;
        ck_assert_int_eq(vit_colour_draw(&c, &rng, &g), VIT_OK);
        double u0 = vit_rng_uniform(&copy), u1 = vit_rng_uniform(&copy);
        double u2 = vit_rng_uniform(&copy), u3 = vit_rng_uniform(&copy);
        double u4 = vit_rng_uniform(&copy);
        int p = (int)vit_rng_below(&copy, 6);
        double u6 = vit_rng_uniform(&copy);
        ck_assert(c.brightness == 1 + 0.4 * (2 * u0 - 1));
        ck_assert(c.contrast == 1 + 0.2 * (2 * u1 - 1));
        ck_assert(c.saturation == 1 + 0.5 * (2 * u2 - 1));
        ck_assert(c.hue == 0.1 * (2 * u3 - 1));
        ck_assert_int_eq(c.gray, u4 < 0.3);
        ck_assert_int_eq(c.perm, p);
        ck_assert_int_eq(c.invert, u6 < 0.5);
        ck_assert(memcmp(&rng, &copy, sizeof rng) == 0);
        perms[c.perm]++;
        grays += c.gray;
        inverts += c.invert;
    }
    for (int p = 0; p < 6; p++)
        ck_assert_msg(perms[p] > 60 && perms[p] < 140, "perm %d drawn %d times of 600", p,
                      perms[p]);
    ck_assert_msg(grays > 140 && grays < 220, "%d gray of 600", grays);
    ck_assert_msg(inverts > 250 && inverts < 350, "%d inverted of 600", inverts);
    g.hue = 0.6;
    ck_assert_int_eq(vit_colour_draw(&c, &rng, &g), VIT_EINVAL);
    g.hue = 0.1;
    g.channel_perm = 2;
    ck_assert_int_eq(vit_colour_draw(&c, &rng, &g), VIT_EINVAL);
}
END_TEST

/* In a batch: each item translated, then changed in colour by the draws a
 * copy of the generator predicts (the shift's two, then the colour's). */
START_TEST(test_colour_in_batch)
{
    enum { B = 5 };
    vit_real images[B * IMG], out[B * IMG], want[IMG];
    int labels[B] = {0, 1, 0, 1, 0}, lab[B], idx[B] = {4, 2, 0, 1, 3}, mixed;
    for (int i = 0; i < B; i++)
        for (int j = 0; j < IMG; j++)
            images[i * IMG + j] = (vit_real)fmod(0.071 * (i * IMG + j) + 0.2, 1.0);
    vit_dataset ds = {.count = B, .height = H, .width = W, .channels = 3, .classes = 2,
                      .images = images, .labels = labels};
    vit_augment_scratch *s = NULL;
    ck_assert_int_eq(vit_augment_scratch_new(&s, B, H, W, 3), VIT_OK);
    vit_augment g = {.shift = 1, .brightness = 0.3, .saturation = 0.4, .hue = 0.2,
                     .grayscale = 0.5, .channel_perm = 1, .invert = 1, .mix_prob = 1,
                     .classes = 2};
    vit_rng rng, copy;
    vit_rng_seed(&rng, 3);
    copy = rng;
    ck_assert_int_eq(vit_augment_batch(&g, &ds, idx, B, 0, B, s, &rng, out, lab, NULL, &mixed,
                                       NULL), VIT_OK);
    int changed = 0;
    for (int k = 0; k < B; k++) {
        int dy = (int)vit_rng_below(&copy, 3) - 1, dx = (int)vit_rng_below(&copy, 3) - 1;
        vit_colour c;
        ck_assert_int_eq(vit_colour_draw(&c, &copy, &g), VIT_OK);
        vit_translate(want, images + idx[k] * IMG, H, W, 3, dy, dx);
        ck_assert_int_eq(vit_colour_apply(want, H, W, 3, &c), VIT_OK);
        ck_assert_msg(memcmp(out + k * IMG, want, sizeof want) == 0, "item %d", k);
        ck_assert_int_eq(lab[k], labels[idx[k]]);
        vit_translate(want, images + idx[k] * IMG, H, W, 3, dy, dx);
        changed += memcmp(out + k * IMG, want, sizeof want) != 0;
    }
    ck_assert(memcmp(&rng, &copy, sizeof rng) == 0);
    ck_assert_int_eq(changed, B);
    /* saturation on a gray set is refused, naming the channels */
    ds.channels = 1;
    vit_augment_scratch *s1 = NULL;
    ck_assert_int_eq(vit_augment_scratch_new(&s1, B, H, W, 1), VIT_OK);
    ck_assert_int_eq(vit_augment_batch(&g, &ds, idx, B, 0, B, s1, &rng, out, lab, NULL, &mixed,
                                       NULL), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "3 channels"));
    vit_augment_scratch_free(s1);
    vit_augment_scratch_free(s);
}
END_TEST

START_TEST(test_colour_config_keys)
{
    vit_config c;
    vit_train_config tc;
    vit_config_default(&c);
    vit_train_config_default(&tc);
    ck_assert_int_eq(vit_train_config_set(&tc, "hue", "0.6"), VIT_EINVAL);
    ck_assert_int_eq(vit_train_config_set(&tc, "brightness", "1.5"), VIT_EINVAL);
    ck_assert_int_eq(vit_train_config_set(&tc, "channel_perm", "2"), VIT_EINVAL);
    ck_assert_int_eq(vit_train_config_set(&tc, "hue", "0.05"), VIT_OK);
    ck_assert(tc.hue == 0.05);
    /* on the gray default: refused by name */
    ck_assert_int_eq(vit_train_config_check(&tc, &c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "hue"));
    c.channels = 3;
    ck_assert_int_eq(vit_train_config_check(&tc, &c), VIT_OK);
    tc.brightness = 1.5; /* set by code, not text */
    ck_assert_int_eq(vit_train_config_check(&tc, &c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "brightness"));
    /* brightness, contrast and invert are fine on gray images */
    vit_config_default(&c);
    vit_train_config_default(&tc);
    tc.brightness = 0.2;
    tc.contrast = 0.2;
    tc.invert = 1;
    ck_assert_int_eq(vit_train_config_check(&tc, &c), VIT_OK);
}
END_TEST

/* Image i, channel c of the affine test images: a[c] + b[c] g(p), g a
 * shape; b[2] = 0 for image 1 (a flat channel). */
static double shape_g(int p) { return fmod(0.61 * p * p + 0.3 * p, 1.0); }

static void affine_images(vit_real *x, double a[2][3], double b[2][3])
{
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 3; c++) {
            a[i][c] = 0.1 + 0.3 * c + 0.2 * i;
            b[i][c] = (c == 1 ? -0.6 : 0.4) + 0.1 * i;
        }
    b[1][2] = 0;
    for (int i = 0; i < 2; i++)
        for (int p = 0; p < N; p++)
            for (int c = 0; c < 3; c++)
                x[((size_t)i * N + p) * 3 + c] = (vit_real)(a[i][c] + b[i][c] * shape_g(p));
}

START_TEST(test_image_norm_exact)
{
    vit_real x[2 * IMG], y[2 * IMG];
    double a[2][3], b[2][3];
    affine_images(x, a, b);
    ck_assert_int_eq(vit_image_norm(y, x, 2, N, 3), VIT_OK);
    /* the closed form: b (g - mean g) / sqrt(b^2 var g + eps), the shape's
     * own mean and variance, a gone */
    double gm = 0, gv = 0;
    for (int p = 0; p < N; p++)
        gm += shape_g(p) / N;
    for (int p = 0; p < N; p++)
        gv += (shape_g(p) - gm) * (shape_g(p) - gm) / N;
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 3; c++) {
            double s = sqrt(b[i][c] * b[i][c] * gv + VIT_IMAGE_NORM_EPS);
            for (int p = 0; p < N; p++) {
                double want = b[i][c] * (shape_g(p) - gm) / s;
                double got = y[((size_t)i * N + p) * 3 + c];
                ck_assert_msg(fabs(got - want) < 2e-5, "image %d channel %d pixel %d: %.9g, "
                              "want %.9g", i, c, p, got, want);
                if (b[i][c] == 0) /* a flat channel: nothing blown up */
                    ck_assert(fabs(got) < 1e-5);
            }
        }
    /* in place: the same values */
    vit_real z[2 * IMG];
    memcpy(z, x, sizeof z);
    ck_assert_int_eq(vit_image_norm(z, z, 2, N, 3), VIT_OK);
    ck_assert_mem_eq(z, y, sizeof z);
    /* images are independent: the second alone as in the pair */
    ck_assert_int_eq(vit_image_norm(z, x + IMG, 1, N, 3), VIT_OK);
    ck_assert_mem_eq(z, y + IMG, IMG * sizeof *z);
    ck_assert_int_eq(vit_image_norm(NULL, x, 1, N, 3), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "y is NULL"));
    ck_assert_int_eq(vit_image_norm(y, x, 0, N, 3), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "at least 1"));
}
END_TEST

/* A small colour ViT (8x8x3, a stem) with image_norm on. */
static vit_model *norm_model(int on)
{
    vit_config c;
    vit_config_default(&c);
    c.channels = 3;
    c.classes = 4;
    c.stem = 4;
    c.image_norm = on;
    vit_model *m = vit_model_new(&c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    vit_rng rng;
    vit_rng_seed(&rng, 5);
    vit_model_init(m, &rng);
    return m;
}

static void logits(vit_model *m, const vit_real *x, int n, vit_real *out)
{
    vit_tape *t = vit_tape_new();
    ck_assert_ptr_nonnull(t);
    vit_tensor *z = vit_model_forward(m, t, x, n, 0);
    ck_assert_msg(z != NULL, "%s", vit_last_error());
    memcpy(out, z->data, z->size * sizeof *out);
    vit_tape_free(t);
}

START_TEST(test_image_norm_model)
{
    enum { S = 8, K = 4, B = 3, I = S * S * 3 };
    vit_real x[B * I], xn[B * I], with[B * K], without[B * K], plain[B * K];
    for (int j = 0; j < B * I; j++)
        x[j] = (vit_real)fmod(0.37 * j * j + 0.11 * j, 1.0);
    vit_model *m = norm_model(1), *p = norm_model(0);
    ck_assert_uint_eq(vit_model_param_count(m), vit_model_param_count(p)); /* no tensor of its own */
    ck_assert_mem_eq(vit_model_params(m), vit_model_params(p),
                     vit_model_param_count(m) * sizeof(vit_real));
    /* the model with image_norm on reads x as the one without reads x standardised */
    ck_assert_int_eq(vit_image_norm(xn, x, B, S * S, 3), VIT_OK);
    logits(m, x, B, with);
    logits(p, xn, B, without);
    ck_assert_mem_eq(with, without, sizeof with);
    logits(p, x, B, plain); /* and it is not the identity */
    int differ = 0;
    for (int j = 0; j < B * K; j++)
        differ += with[j] != plain[j];
    ck_assert_int_gt(differ, 0);
    /* the config text says it only when on: other models' text unchanged */
    char text[4096];
    ck_assert_int_gt(vit_config_format(vit_model_config(p), NULL, text, sizeof text), 0);
    ck_assert_ptr_null(strstr(text, "image_norm"));
    ck_assert_int_gt(vit_config_format(vit_model_config(m), NULL, text, sizeof text), 0);
    ck_assert_ptr_nonnull(strstr(text, "\nimage_norm = 1\n"));
    vit_config back;
    vit_config_default(&back);
    ck_assert_int_eq(vit_config_parse(&back, NULL, text, "text"), VIT_OK);
    ck_assert_int_eq(back.image_norm, 1);
    ck_assert_int_eq(vit_config_given(&back, "image_norm"), 1);
    ck_assert_int_eq(vit_config_set(&back, "image_norm", "2"), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "image_norm"));
    /* through a checkpoint: the loaded model standardises too */
    vit_run_state st;
    memset(&st, 0, sizeof st);
    vit_rng_seed(&st.rng, 1);
    const char *path = fu_path("image_norm.ckpt");
    ck_assert_msg(vit_run_save(path, m, NULL, NULL, &st) == VIT_OK, "%s", vit_last_error());
    vit_model *l = NULL;
    vit_run_state got;
    ck_assert_msg(vit_run_load(path, &l, NULL, NULL, &got) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(vit_model_config(l)->image_norm, 1);
    vit_real loaded[B * K], plain_l[B * K];
    logits(l, x, B, loaded);
    logits(p, xn, B, plain_l);
    /* weights stored as float32: the same model, within float rounding */
    for (int j = 0; j < B * K; j++)
        ck_assert_msg(fabs((double)loaded[j] - with[j]) < 1e-4, "logit %d: %.9g, before %.9g", j,
                      (double)loaded[j], (double)with[j]);
    vit_run_state_free(&got);
    remove(path);
    vit_model_free(l);
    vit_model_free(m);
    vit_model_free(p);
}
END_TEST

/* A made-up set of n 8x8x3 images in K classes: a class's shape (a bar at
 * row 2k of the image) on a background; colour_class 0: every image its
 * own random background and bar colours; 1: class k's background colour is
 * fixed (its hue says the class) plus a little noise. */
static void colour_set(vit_dataset *ds, int n, int K, int colour_class, int channels)
{
    enum { S = 8 };
    vit_rng rng;
    vit_rng_seed(&rng, 11 + colour_class);
    vit_real *x = malloc((size_t)n * S * S * channels * sizeof *x);
    int *y = malloc((size_t)n * sizeof *y);
    ck_assert(x && y);
    for (int i = 0; i < n; i++) {
        int k = i % K;
        y[i] = k;
        double bg[3], fg[3];
        for (int c = 0; c < 3; c++) {
            fg[c] = vit_rng_uniform(&rng);
            bg[c] = colour_class ? 0.5 + 0.4 * cos(k * 1.5 + c * 2.0) + 0.05 * vit_rng_uniform(&rng)
                                 : vit_rng_uniform(&rng);
        }
        for (int p = 0; p < S * S; p++) {
            int on = p / S == 2 * k % S;
            for (int c = 0; c < channels; c++)
                x[((size_t)i * S * S + p) * channels + c] = (vit_real)(on ? fg[c] : bg[c]);
        }
    }
    *ds = (vit_dataset){.count = n, .height = S, .width = S, .channels = channels, .classes = K,
                        .images = x, .labels = y};
}

START_TEST(test_recipe_colour_test)
{
    vit_config model;
    vit_config_default(&model);
    /* stem, stem2 and local_conv not given: the rule's */
    for (int colour_class = 0; colour_class < 2; colour_class++) {
        vit_dataset ds;
        colour_set(&ds, 800, 4, colour_class, 3);
        vit_recipe_data d = {ds.count, 8, 8, 3, 4, &ds};
        vit_recipe r;
        char why[1024];
        ck_assert_int_eq(vit_recipe_pick(&d, &model, &r, why, sizeof why), VIT_OK);
        /* about 200 held out, about 50 a class */
        ck_assert_msg(r.colour_chance >= 0.25 && r.colour_chance < 0.32, "%g", r.colour_chance);
        if (colour_class) {
            ck_assert_msg(r.colour_acc > 0.9, "%g", r.colour_acc);
            ck_assert_int_eq(r.channel_perm, 0);
            ck_assert_int_eq(r.invert, 0);
            ck_assert_ptr_nonnull(strstr(why, "no channel_perm or invert"));
            ck_assert_int_eq(r.image_norm, 0);
            ck_assert_ptr_null(strstr(why, "image_norm"));
            /* colour kept: normalised by the set's figures instead */
            ck_assert_int_eq(r.data_norm, 1);
            ck_assert_ptr_nonnull(strstr(why, ", data_norm 1 (colour kept: each channel by the "
                                              "set's mean and std)"));
        } else {
            ck_assert_msg(r.colour_acc < 0.35, "%g", r.colour_acc);
            ck_assert_int_eq(r.channel_perm, 1);
            ck_assert_int_eq(r.invert, 1);
            ck_assert_ptr_nonnull(strstr(why, ", channel_perm and invert (mean colour"));
            ck_assert_int_eq(r.image_norm, 1);
            ck_assert_ptr_nonnull(strstr(why, ", image_norm 1 (colour carries no class)"));
            ck_assert_int_eq(r.data_norm, 0);
            ck_assert_ptr_null(strstr(why, "data_norm"));
        }
        /* brightness and contrast only without image_norm, which undoes them */
        double bc = colour_class ? VIT_RECIPE_JITTER : 0;
        ck_assert(r.brightness == bc && r.contrast == bc
                  && r.saturation == VIT_RECIPE_JITTER && r.hue == VIT_RECIPE_HUE
                  && r.grayscale == VIT_RECIPE_GRAYSCALE);
        ck_assert_ptr_nonnull(strstr(why, colour_class ? "colour jitter 0.3, hue 0.05, grayscale 0.1"
                                     : "saturation 0.3, hue 0.05, grayscale 0.1 (colour images; "
                                       "no brightness or contrast: image_norm undoes them)"));
        /* a model with data_norm: still reordered, but not standardised
         * per image (one normalisation at a time), so brightness and
         * contrast come back */
        vit_config dn = model;
        dn.data_norm = 1;
        ck_assert_int_eq(vit_recipe_pick(&d, &dn, &r, why, sizeof why), VIT_OK);
        ck_assert_int_eq(r.channel_perm, !colour_class);
        ck_assert_int_eq(r.image_norm, 0);
        ck_assert_int_eq(r.data_norm, 1);
        ck_assert(r.brightness == VIT_RECIPE_JITTER && r.contrast == VIT_RECIPE_JITTER);
        ck_assert_ptr_null(strstr(why, "image_norm"));
        /* a model with image_norm given: no data_norm beside it */
        vit_config in = model;
        in.image_norm = 1;
        ck_assert_int_eq(vit_recipe_pick(&d, &in, &r, why, sizeof why), VIT_OK);
        ck_assert_int_eq(r.data_norm, 0);
        ck_assert_ptr_null(strstr(why, "data_norm"));
        /* without the images: jitter, but no test and so no reordering */
        d.images = NULL;
        ck_assert_int_eq(vit_recipe_pick(&d, &model, &r, NULL, 0), VIT_OK);
        ck_assert(r.colour_acc == -1 && r.channel_perm == 0 && r.image_norm == 0
                  && r.brightness > 0 && r.data_norm == 1);
        free(ds.images);
        free(ds.labels);
    }
    /* gray images: nothing of colour, untested */
    vit_dataset ds;
    colour_set(&ds, 800, 4, 0, 1);
    vit_recipe_data d = {ds.count, 8, 8, 1, 4, &ds};
    vit_recipe r;
    char why[1024];
    ck_assert_int_eq(vit_recipe_pick(&d, &model, &r, why, sizeof why), VIT_OK);
    ck_assert(r.brightness == 0 && r.contrast == 0 && r.saturation == 0 && r.hue == 0
              && r.grayscale == 0 && r.channel_perm == 0 && r.invert == 0 && r.image_norm == 0
              && r.data_norm == 0 && r.colour_acc == -1);
    ck_assert_ptr_null(strstr(why, "colour"));
    free(ds.images);
    free(ds.labels);
}
END_TEST

static Suite *colour_suite(void)
{
    Suite *s = suite_create("colour");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_colour_steps_exact);
    tcase_add_test(tc, test_hue_keeps_luma);
    tcase_add_test(tc, test_colour_one_channel);
    tcase_add_test(tc, test_colour_draw);
    tcase_add_test(tc, test_colour_in_batch);
    tcase_add_test(tc, test_colour_config_keys);
    tcase_add_test(tc, test_recipe_colour_test);
    tcase_add_test(tc, test_image_norm_exact);
    tcase_add_test(tc, test_image_norm_model);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fu_run_suite(colour_suite, "/tmp/vit_colour_XXXXXX"); }
