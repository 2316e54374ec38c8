/*
 * tests/test_swin.c - the built-in Swin Transformer (src/model/model_swin.c)
 * through the public API: `arch = swin` and its keys, vit_model, the
 * arch's hooks (vit/arch.h).  Every parameter's gradient against central
 * differences in float64 (with and without stochastic depth's scales, and
 * with the convolutional stem), the recipe's choices, bad configs refused,
 * the stem's multiply-adds and old configs without it, and a model written by
 * torchvision (tools/torch_swin_fixture.py; square windows, and 2x3 ones)
 * loading through vit_safetensors_load and reproducing its logits.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vit/arch.h"
#include "vit/core.h"
#include "vit/model.h"
#include "vit/params.h"
#include "vit/recipe.h"
#include "vit/safetensors.h"
#include "vit/tape.h"

enum { GB = 2, NBLOCKS = 4 };

/* Sets key = value, failing the test when refused. */
static void set(vit_config *c, const char *key, const char *value)
{
    ck_assert_msg(vit_config_set(c, key, value) == VIT_OK, "%s = %s: %s", key, value,
                  vit_last_error());
}

/* 8x8 images of 2 channels, patch 2: a 4x4 grid in windows of 2 (block 1
 * shifted by 1, across the wrapped border), merged to 2x2 (one window:
 * no shift there); widths 4 and 8, two heads each, 3 classes: the
 * fixture's model too.  wide: 8x16 images instead, whose 2x4 second stage
 * shifts block 1 by 0 rows and 1 column (the --wide fixture's model).
 * wide 2: 8x12 images in windows of 2 rows by 3 columns (window_w 3): a
 * 4x6 grid whose block 1 shifts by 1 row and 1 column, merged to 2x3, one
 * window (no shift). */
static void tiny_of(vit_config *c, int wide)
{
    vit_config_default(c);
    set(c, "arch", "swin");
    static const char *const kv[][2] = {
        {"image_height", "8"}, {"channels", "2"}, {"classes", "3"},
        {"patch", "2"}, {"window", "2"}, {"embed_dim", "4"}, {"stages", "2"},
        {"depth_1", "2"}, {"depth_2", "2"}, {"heads_1", "2"}, {"heads_2", "2"},
        {"mlp_ratio", "2"}};
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        set(c, kv[i][0], kv[i][1]);
    set(c, "image_width", wide == 2 ? "12" : wide ? "16" : "8");
    if (wide == 2)
        set(c, "window_w", "3");
}

static void tiny(vit_config *c) { tiny_of(c, 0); }

/* tiny with the convolutional stem: 3 channels of 3x3, then 4 of 4x4 at
 * stride 2, whose 4x4 map patch 1 cuts into the same 4x4 grid. */
static void tiny_stem(vit_config *c)
{
    tiny(c);
    set(c, "stem", "3");
    set(c, "stem2", "4");
    set(c, "patch", "1");
}

/* The arch's hooks run by hand on our own vit_params, as vit_model does. */
typedef struct swin_ctx {
    const vit_arch *a;
    vit_config cfg;
    void *state;
    vit_params *P;
    vit_tape *tape;
    vit_real *images;
    int labels[GB];
    const vit_real *drop; /* stochastic depth's scales, [2 NBLOCKS, GB], or NULL */
    int recompute;        /* vit_arch_run's: the layer norms' outputs remade */
    int width;            /* the images' width: 8, or 16 (tiny_of's wide) */
} swin_ctx;

static vit_tensor *forward(swin_ctx *c, vit_tape *t)
{
    vit_arch_run r = {.cfg = &c->cfg, .state = c->state, .params = c->P, .tape = t,
                      .images = vit_tape_leaf(t, c->images, NULL, 4, (int[]){GB, 8, c->width, 2}),
                      .batch = GB, .grads = vit_params_grads(c->P), .train = 1,
                      .drop_scale = c->drop, .drop_stride = GB, .recompute = c->recompute};
    vit_tensor *z = c->a->forward(&r);
    return vit_op_cross_entropy(t, z, c->labels, (vit_real)0.1, NULL);
}

static double swin_loss(void *p)
{
    swin_ctx *c = p;
    vit_tape_reset(c->tape);
    vit_tensor *loss = forward(c, c->tape);
    ck_assert_msg(loss != NULL, "forward failed: %s", vit_last_error());
    return (double)loss->data[0];
}

/* Every parameter random and of order one (gains, biases and the bias
 * tables too), so no gradient is trivially zero; the whole network's
 * gradient against central differences, tensor by tensor.  _i & 1: with
 * stochastic depth's scales, every branch of image 0 kept (x 1.25), of
 * image 1 alternately dropped and kept; _i & 2: with recompute (the layer
 * norms' outputs remade in the backward); _i = 4, 5: with the stem
 * (tiny_stem: its two convolutions' 4 tensors first), 5 with drop path;
 * _i = 6: the wide model, its second stage shifted along one axis only;
 * _i = 7: rectangular windows of 2x3 (tiny_of's wide 2). */
START_TEST(test_swin_gradient)
{
    vit_real drop[2 * NBLOCKS * GB];
    for (int l = 0; l < 2 * NBLOCKS; l++)
        drop[l * GB] = (vit_real)1.25, drop[l * GB + 1] = (vit_real)(l % 2 ? 1.25 : 0);
    swin_ctx c = {.a = vit_arch_find("swin"), .P = vit_params_new(), .tape = vit_tape_new(),
                  .drop = _i & 1 ? drop : NULL, .recompute = _i < 4 && (_i >> 1) & 1,
                  .width = _i == 6 ? 16 : _i == 7 ? 12 : 8};
    int stem = _i == 4 || _i == 5;
    ck_assert_ptr_nonnull(c.a);
    if (stem)
        tiny_stem(&c.cfg);
    else
        tiny_of(&c.cfg, _i == 6 ? 1 : _i == 7 ? 2 : 0);
    ck_assert_int_eq(c.a->check(&c.cfg), VIT_OK);
    ck_assert_msg(c.a->build(&c.cfg, c.P, &c.state) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(vit_params_alloc(c.P), VIT_OK);
    vit_arch_info info = {0};
    c.a->describe(&c.cfg, &info);
    ck_assert_int_eq(info.drop_layers, NBLOCKS);
    size_t n = vit_params_count(c.P);
    uint64_t seed = 7;
    gc_fill(vit_params_values(c.P), n, &seed, 0.6);
    c.images = gc_zeros((size_t)GB * 8 * c.width * 2);
    for (int i = 0; i < GB * 8 * c.width * 2; i++)
        c.images[i] = (vit_real)gc_uniform(&seed);
    for (int i = 0; i < GB; i++)
        c.labels[i] = (i + 1) % 3;

    vit_tape *t = vit_tape_new();
    vit_params_zero_grads(c.P);
    vit_tensor *loss = forward(&c, t);
    ck_assert_msg(loss != NULL, "%s", vit_last_error());
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    vit_real *grads = gc_zeros(n);
    memcpy(grads, vit_params_grads(c.P), n * sizeof *grads);

    double worst = 0;
    int nt = vit_params_tensor_count(c.P);
    ck_assert_int_eq(nt, 4 * stem + 4 + NBLOCKS * 13 + 3 + 4);
    if (stem)
        ck_assert_str_eq(vit_params_tensor(c.P, 0)->name, "stem.w");
    vit_real *values = vit_params_values(c.P);
    for (int i = 0; i < nt; i++) {
        const vit_param_tensor *pt = vit_params_tensor(c.P, i);
        double e = gc_check(pt->name, values + pt->offset, grads + pt->offset, pt->size,
                            swin_loss, &c);
        ck_assert_msg(e <= GC_TOL, "%s: max_rel %.3e > %.0e", pt->name, e, GC_TOL);
        double norm = 0;
        for (size_t j = 0; j < pt->size; j++)
            norm += fabs((double)grads[pt->offset + j]);
        /* (The key bias adds q.b_k to a whole row of scores, which the
         * softmax ignores: only that third of qkv.b has no gradient.) */
        ck_assert_msg(norm > 1e-6, "%s: gradient is zero", pt->name);
        worst = fmax(worst, e);
    }
    if (_i == 7) /* the tables of 2x3 windows: (2*2-1) * (2*3-1) rows */
        ck_assert_int_eq(vit_params_tensor(c.P, 6)->shape[0], 15);
    printf("swin gradient%s%s%s%s%s: %d tensors, %zu parameters, max_rel %.2e\n",
           _i & 1 ? " (drop path)" : "", _i & 2 && _i < 4 ? " (recompute)" : "",
           stem ? " (stem)" : "", _i == 6 ? " (8x16: a shift on one axis)" : "",
           _i == 7 ? " (8x12: windows of 2x3)" : "", nt, n, worst);
    c.a->release(c.state);
    vit_params_free(c.P);
    vit_tape_free(c.tape);
    vit_tape_free(t);
    free(c.images);
    free(grads);
}
END_TEST

/* vit_model_new refuses cfg with a message containing `want`. */
static void refused(const vit_config *c, const char *want)
{
    vit_model *m = vit_model_new(c);
    ck_assert_msg(m == NULL, "accepted; wanted an error about %s", want);
    ck_assert_msg(strstr(vit_last_error(), want), "'%s' lacks '%s'", vit_last_error(), want);
}

/* Bad configs are refused naming the key and the problem; a stage key
 * past `stages` is refused rather than ignored; the ViT's keys are not
 * the Swin's. */
START_TEST(test_swin_rejects_bad_configs)
{
    vit_config c;
    tiny(&c);
    vit_model *m = vit_model_new(&c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    vit_model_free(m);
    set(&c, "window", "3"); /* 4x4 grid */
    refused(&c, "window 3");
    tiny(&c);
    set(&c, "heads_2", "3"); /* width 8 */
    refused(&c, "stage 1");
    tiny(&c);
    set(&c, "patch", "3");
    refused(&c, "patch 3");
    tiny(&c);
    set(&c, "stages", "3"); /* 4 -> 2 -> 1: 1 is not a multiple of window 2 */
    refused(&c, "window 2");
    tiny(&c);
    set(&c, "depth_3", "5");
    refused(&c, "depth_3");
    tiny(&c);
    set(&c, "window_w", "3"); /* 4x4 grid: rows of 2 fit, columns of 3 do not */
    refused(&c, "stage 0's 4x4 token grid is not a multiple of window 2x3 (rows of 2, columns "
            "of 3)");
    tiny_of(&c, 2);
    set(&c, "stages", "3"); /* 4x6 -> 2x3 -> 1x1 (odd before the merge) */
    refused(&c, "stage 1's 2x3 grid is odd");
    tiny_of(&c, 2);
    set(&c, "window", "4"); /* window_w given: 4x3 windows on the 4x6 grid, then 2x3 */
    refused(&c, "stage 1's 2x3 token grid is not a multiple of window 4x3");
    tiny(&c);
    ck_assert_int_eq(vit_config_set(&c, "window_w", "0"), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "window_w"));
    tiny(&c);
    ck_assert_int_eq(vit_config_set(&c, "depth_1", "0"), VIT_EINVAL);
    ck_assert_int_eq(vit_config_set(&c, "dim", "64"), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "vit"));
}
END_TEST

/* The stem's bad combinations: stem2 without stem, stem2 on an odd image,
 * a patch that does not divide stem2's map, a patch that leaves a grid the
 * window does not fit, a negative channel count. */
START_TEST(test_swin_rejects_bad_stems)
{
    vit_config c;
    tiny_stem(&c);
    vit_model *m = vit_model_new(&c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    vit_model_free(m);
    set(&c, "stem", "0");
    refused(&c, "stem2: 4 channels of a second stem convolution need a first (stem > 0)");
    tiny_stem(&c);
    c.image_height = c.image_width = 9; /* patch 1, window 2: odd only for stem2 */
    refused(&c, "stem2: its stride 2 halves the 9x9 feature map");
    tiny_stem(&c);
    set(&c, "patch", "3");
    refused(&c, "patch 3 does not divide the 4x4 feature map (stem2 halves the image)");
    tiny_stem(&c);
    set(&c, "patch", "2"); /* the map's 2x2 grid merges to 1x1: no window 2 there */
    refused(&c, "window 2");
    tiny_stem(&c);
    ck_assert_int_eq(vit_config_set(&c, "stem", "-1"), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "stem"));
}
END_TEST

/* The stem's multiply-adds: Fashion-MNIST's 28x28 Swin with stem 16, stem2
 * 32 and patch 1 (the same 14x14 grid) costs the plain one's plus the two
 * convolutions, less the patch embedding's 2x2x1 -> 32 and plus its
 * 1x1x32 -> 32 per token. */
START_TEST(test_swin_stem_macs)
{
    vit_config c;
    vit_config_default(&c);
    set(&c, "arch", "swin");
    c.image_height = c.image_width = 28, c.channels = 1, c.classes = 10;
    /* under the rule's count: the plain Swin */
    ck_assert_int_eq(vit_config_arch(&c)->adapt(&c, VIT_RECIPE_STEM2_COUNT - 1, NULL, 0), VIT_OK);
    char text[4096];
    ck_assert_int_gt(vit_config_format(&c, NULL, text, sizeof text), 0);
    ck_assert_msg(strstr(text, "patch = 2\n") && strstr(text, "stem = 0\n"), "%s", text);
    size_t plain = vit_config_macs(&c);
    set(&c, "stem", "16");
    set(&c, "stem2", "32");
    set(&c, "patch", "1");
    size_t with = vit_config_macs(&c);
    size_t convs = 28 * 28 * 9 * 1 * 16 + 14 * 14 * 16 * 16 * 32;
    size_t patches = 14 * 14 * (1 * 1 * 32 * 32 - 2 * 2 * 1 * 32);
    ck_assert_uint_gt(plain, 0);
    ck_assert_uint_eq(with, plain + convs + patches);
    printf("swin 28x28 multiply-adds: %zu, with stem 16 and stem2 32 %zu\n", plain, with);
}
END_TEST

/* A config written before the stem keys (a checkpoint's or an export's
 * text without their lines) reads back with stem = stem2 = 0: the same
 * model, tensor by tensor. */
START_TEST(test_swin_old_config_no_stem)
{
    vit_config c, back;
    tiny(&c);
    char text[4096], old[4096] = "";
    ck_assert_int_gt(vit_config_format(&c, NULL, text, sizeof text), 0);
    ck_assert_ptr_nonnull(strstr(text, "stem = 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "stem2 = 0\n"));
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"))
        if (strncmp(l, "stem", 4) != 0)
            strcat(strcat(old, l), "\n");
    ck_assert_ptr_null(strstr(old, "stem"));
    vit_config_default(&back);
    ck_assert_msg(vit_config_parse(&back, NULL, old, "old") == VIT_OK, "%s", vit_last_error());
    vit_model *a = vit_model_new(&c), *b = vit_model_new(&back);
    ck_assert_msg(a && b, "%s", vit_last_error());
    ck_assert_int_eq(vit_model_tensor_count(a), vit_model_tensor_count(b));
    for (int i = 0; i < vit_model_tensor_count(a); i++)
        ck_assert_str_eq(vit_model_tensor_at(a, i)->name, vit_model_tensor_at(b, i)->name);
    ck_assert_uint_eq(vit_config_param_count(&back), vit_config_param_count(&c));
    vit_model_free(a);
    vit_model_free(b);
}
END_TEST

/* window_w, the windows' columns, follows window while it is not given: a
 * config or checkpoint written before the key (or without it) is square,
 * and a square config's text is what it was before the key (no window_w
 * line); a rectangular one's text has the line after window's and reads
 * back to the same model. */
START_TEST(test_swin_window_w_follows)
{
    vit_config c, back;
    tiny(&c);
    char text[4096], again[4096];
    int n = vit_config_format(&c, NULL, text, sizeof text);
    ck_assert_int_gt(n, 0);
    ck_assert_msg(strstr(text, "window = 2\nembed_dim = 4\n") && !strstr(text, "window_w"),
                  "%s", text);
    /* window alone, before or after: the windows square */
    set(&c, "window", "4");
    ck_assert_int_eq(vit_config_given(&c, "window_w"), 0);
    c.image_height = c.image_width = 16; /* a 8x8 grid, 4x4 after merging */
    vit_model *m = vit_model_new(&c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    ck_assert_str_eq(vit_model_tensor_at(m, 6)->name, "0.0.rel");
    ck_assert_int_eq(vit_model_tensor_at(m, 6)->shape[0], 7 * 7);
    vit_model_free(m);
    ck_assert_int_gt(vit_config_format(&c, NULL, text, sizeof text), 0);
    ck_assert_msg(strstr(text, "window = 4\n") && !strstr(text, "window_w"), "%s", text);
    /* old text (no window_w line) with window 4: square, its text the same */
    vit_config_default(&back);
    ck_assert_msg(vit_config_parse(&back, NULL, text, "old") == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(vit_config_given(&back, "window_w"), 0);
    ck_assert_int_gt(vit_config_format(&back, NULL, again, sizeof again), 0);
    ck_assert_str_eq(again, text);
    ck_assert_uint_eq(vit_config_param_count(&back), vit_config_param_count(&c));
    /* given: kept whatever window does after; written after window */
    set(&c, "window_w", "2");
    set(&c, "window", "8");
    set(&c, "window", "4");
    ck_assert_int_gt(vit_config_format(&c, NULL, text, sizeof text), 0);
    ck_assert_msg(strstr(text, "window = 4\nwindow_w = 2\nembed_dim"), "%s", text);
    m = vit_model_new(&c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    ck_assert_int_eq(vit_model_tensor_at(m, 6)->shape[0], 7 * 3);
    vit_model_free(m);
    vit_config_default(&back);
    ck_assert_msg(vit_config_parse(&back, NULL, text, "new") == VIT_OK, "%s", vit_last_error());
    ck_assert_int_gt(vit_config_format(&back, NULL, again, sizeof again), 0);
    ck_assert_str_eq(again, text);
    ck_assert_uint_eq(vit_config_param_count(&back), vit_config_param_count(&c));
    ck_assert_uint_eq(vit_config_macs(&back), vit_config_macs(&c));
    /* the multiply-adds count T = Mh * Mw scores per token: 4x2 windows
     * against 4x4 differ by 2 (16 - 8) C per token and block */
    size_t rect = vit_config_macs(&c);
    set(&c, "window_w", "4");
    ck_assert_int_gt(vit_config_format(&c, NULL, text, sizeof text), 0);
    ck_assert_msg(!strstr(text, "window_w"), "equal to window: left out\n%s", text);
    size_t square = vit_config_macs(&c);
    /* stage 0: 8x8 tokens, width 4, 2 blocks; stage 1: 4x4, width 8, 2 */
    ck_assert_uint_eq(square - rect, (size_t)2 * (16 - 8) * (64 * 4 * 2 + 16 * 8 * 2));
}
END_TEST

/* The rule before rectangular windows (square, the largest of 8..4
 * dividing both sides, else one window over a square grid, else refused)
 * and its stages: what every shape it accepted must still get. */
static int old_rule(int gh, int gw, int *stages)
{
    int M = 0;
    for (int m = 8; m >= 4 && !M; m--)
        if (gh % m == 0 && gw % m == 0)
            M = m;
    if (!M)
        M = gh == gw ? gh : 0;
    *stages = 1;
    while (M && *stages < 3 && gh % 2 == 0 && gw % 2 == 0 && (gh / 2) % M == 0 &&
           (gw / 2) % M == 0) {
        ++*stages;
        gh /= 2;
        gw /= 2;
    }
    return M;
}

/* The int after "key = " in config text, or -1. */
static int text_int(const char *text, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "\n%s = ", key);
    const char *p = strstr(text, pat);
    return p ? atoi(p + strlen(pat)) : -1;
}

/* Every image shape from 4x4 to 100x100: where the old rule gave a square
 * window it is kept (window_w equal, left out of the text) with the same
 * stages; where it refused the grid, the windows are rectangular, the
 * largest of 8..4 dividing each side (else the side), and the model
 * builds. */
START_TEST(test_swin_recipe_keeps_square)
{
    int kept = 0, now = 0;
    for (int h = 4; h <= 100; h++)
        for (int w = 4; w <= 100; w++) {
            vit_config c;
            vit_config_default(&c);
            set(&c, "arch", "swin");
            c.image_height = h, c.image_width = w, c.channels = 3, c.classes = 10;
            char text[4096];
            if (vit_config_arch(&c)->adapt(&c, 100, NULL, 0) != VIT_OK) {
                ck_assert_msg(strstr(vit_last_error(), "no patch of 1..16"), "%dx%d: %s", h, w,
                              vit_last_error());
                continue;
            }
            ck_assert_int_gt(vit_config_format(&c, NULL, text, sizeof text), 0);
            int P = text_int(text, "patch"), gh = h / P, gw = w / P, stages;
            int M = old_rule(gh, gw, &stages);
            int Mh = text_int(text, "window"), Mw = text_int(text, "window_w");
            if (M) {
                ck_assert_msg(Mh == M && Mw == -1 && text_int(text, "stages") == stages,
                              "%dx%d (grid %dx%d): window %d, window_w %d, stages %d; before "
                              "window %d, stages %d", h, w, gh, gw, Mh, Mw,
                              text_int(text, "stages"), M, stages);
                kept++;
            } else {
                ck_assert_msg(Mw > 0 && Mw != Mh && gh % Mh == 0 && gw % Mw == 0,
                              "%dx%d (grid %dx%d): window %d, window_w %d", h, w, gh, gw, Mh, Mw);
                for (int m = 8; m > Mh; m--)
                    ck_assert_msg(m > gh || gh % m, "%dx%d: rows of %d, not %d", h, w, Mh, m);
                for (int m = 8; m > Mw; m--)
                    ck_assert_msg(m > gw || gw % m, "%dx%d: columns of %d, not %d", h, w, Mw, m);
                ck_assert_msg(vit_config_check(&c) == VIT_OK, "%dx%d: %s", h, w,
                              vit_last_error());
                now++;
            }
        }
    printf("swin rule: %d shapes keep their square window, %d refused before now windowed\n",
           kept, now);
    ck_assert_int_gt(kept, 100);
    ck_assert_int_gt(now, 1000);
}
END_TEST

/* What the recipe's rule (the arch's adapt hook) sets for images of h x w:
 * the formatted config must hold every line of want. */
static void adapted(int h, int w, int count, const char *const *want, int nwant,
                    const char *why_has)
{
    vit_config c;
    vit_config_default(&c);
    set(&c, "arch", "swin");
    c.image_height = h, c.image_width = w, c.channels = 3, c.classes = 10;
    const vit_arch *a = vit_config_arch(&c);
    char why[512], text[4096];
    ck_assert_int_eq(a->adapt(&c, count, why, sizeof why), VIT_OK);
    ck_assert_msg(strstr(why, why_has), "%dx%d: '%s' lacks '%s'", h, w, why, why_has);
    ck_assert_int_gt(vit_config_format(&c, NULL, text, sizeof text), 0);
    for (int i = 0; i < nwant; i++)
        ck_assert_msg(strstr(text, want[i]), "%dx%d: no '%s' in\n%s", h, w, want[i], text);
    ck_assert_int_eq(vit_config_check(&c), VIT_OK);
}

/* Under VIT_RECIPE_STEM2_COUNT images: 28x28 -> patch 2, 14x14 grid,
 * window 7, two stages (7x7 after merging); 32x32 -> 16x16 grid, window 8.
 * From that count on, the same grids of the stem's half-size map (patch
 * 1), with the ViT recipe's stem channels; 64x64 -> patch 4 and 96x96 ->
 * patch 6 without (a plain patch over 2); a key the user gave is kept; no
 * rule fits 37x37; 28x28 with stem2 given -> patch 1 of its 14x14 map,
 * with a stem alone patch 2. */
#define STEMS "stem = " VIT_RECIPE_TEXT(VIT_RECIPE_STEM) "\n", \
              "stem2 = " VIT_RECIPE_TEXT(VIT_RECIPE_STEM2) "\n"
START_TEST(test_swin_recipe)
{
    const int few = VIT_RECIPE_STEM2_COUNT - 1, many = VIT_RECIPE_STEM2_COUNT;
    adapted(28, 28, few, (const char *const[]){"patch = 2\n", "window = 7\n", "stages = 2\n",
            "stem = 0\n", "stem2 = 0\n"}, 5, "patch 2 makes a 14x14 grid (at most 16x16), "
            "window 7 divides it, 2 stages (7x7 after merging)");
    adapted(32, 32, few, (const char *const[]){"patch = 2\n", "window = 8\n", "stages = 2\n"},
            3, "16x16 grid");
    adapted(28, 28, many, (const char *const[]){"patch = 1\n", "window = 7\n", "stages = 2\n",
            STEMS}, 5, "patch 1 makes a 14x14 grid of stem2's 14x14 map (at most 16x16), window "
            "7 divides it, 2 stages (7x7 after merging), widths 32..64, depths 2+6, stem 16 and "
            "stem2 32 before the patches (10000 images or more)");
    adapted(32, 32, many, (const char *const[]){"patch = 1\n", "window = 8\n", STEMS}, 4,
            "16x16 grid of stem2's 16x16 map");
    adapted(64, 64, many, (const char *const[]){"patch = 4\n", "window = 8\n", "stem = 0\n"},
            3, "patch 4");
    adapted(96, 96, many, (const char *const[]){"patch = 6\n", "window = 8\n", "stem = 0\n"},
            3, "patch 6");
    /* No square window of 8..4 tiles these grids: rectangular ones, the
     * largest of 8..4 per side, as many stages as both sides halve into */
    adapted(64, 56, few, (const char *const[]){"patch = 4\n", "window = 8\n",
            "window_w = 7\n", "stages = 2\n"}, 4, "patch 4 makes a 16x14 grid (at most 16x16), "
            "window 8x7 divides it, 2 stages (8x7 after merging), widths 32..64, depths 2+6");
    adapted(56, 64, few, (const char *const[]){"patch = 4\n", "window = 7\n",
            "window_w = 8\n", "stages = 2\n"}, 4, "patch 4 makes a 14x16 grid (at most 16x16), "
            "window 7x8 divides it, 2 stages (7x8 after merging)");
    adapted(64, 40, few, (const char *const[]){"patch = 4\n", "window = 8\n",
            "window_w = 5\n", "stages = 2\n"}, 4, "patch 4 makes a 16x10 grid (at most 16x16), "
            "window 8x5 divides it, 2 stages (8x5 after merging)");
    /* 8x64: a 2x16 grid of patch 4, no window of 8..4 for 2 rows: one
     * window across them, 2x8, one stage (1 row after merging) */
    adapted(8, 64, few, (const char *const[]){"patch = 4\n", "window = 2\n",
            "window_w = 8\n", "stages = 1\n"}, 4, "window 2x8 divides it, 1 stage,");
    /* Any of patch, stem and stem2 given: the rule leaves the stem alone. */
    static const char *const given[][2] = {{"patch", "2"}, {"stem", "0"}, {"stem2", "0"}};
    for (int g = 0; g < 3; g++) {
        vit_config c;
        vit_config_default(&c);
        set(&c, "arch", "swin");
        set(&c, given[g][0], given[g][1]);
        c.image_height = c.image_width = 28, c.channels = 1, c.classes = 10;
        char why[512], text[4096];
        ck_assert_int_eq(vit_config_arch(&c)->adapt(&c, many, why, sizeof why), VIT_OK);
        ck_assert_int_gt(vit_config_format(&c, NULL, text, sizeof text), 0);
        ck_assert_msg(strstr(text, "patch = 2\n") && strstr(text, "stem2 = 0\n"), "%s: %s",
                      given[g][0], text);
        ck_assert_msg(!strstr(why, "stem 16"), "%s: %s", given[g][0], why);
    }
    vit_config c;
    vit_config_default(&c);
    set(&c, "arch", "swin");
    set(&c, "window", "4");
    c.image_height = c.image_width = 32, c.channels = 3, c.classes = 10;
    char why[512], text[4096];
    ck_assert_int_eq(vit_config_arch(&c)->adapt(&c, many, why, sizeof why), VIT_OK);
    ck_assert_int_gt(vit_config_format(&c, NULL, text, sizeof text), 0);
    ck_assert_msg(strstr(text, "window = 4\n"), "%s", text);
    c.image_height = c.image_width = 37;
    ck_assert_int_eq(vit_config_arch(&c)->adapt(&c, many, why, sizeof why), VIT_EINVAL);
    /* With stem2 the patch is picked for its 14x14 map (patch 1: the same
     * grid); with a stem alone, whose map is the image's size, as before. */
    for (int two = 0; two < 2; two++) {
        vit_config_default(&c);
        set(&c, "arch", "swin");
        set(&c, "stem", "16");
        if (two)
            set(&c, "stem2", "32");
        c.image_height = c.image_width = 28, c.channels = 1, c.classes = 10;
        ck_assert_int_eq(vit_config_arch(&c)->adapt(&c, 60000, why, sizeof why), VIT_OK);
        ck_assert_int_gt(vit_config_format(&c, NULL, text, sizeof text), 0);
        ck_assert_msg(strstr(text, two ? "patch = 1\n" : "patch = 2\n"), "%s", text);
        ck_assert_msg(strstr(text, "window = 7\n") && strstr(text, "stages = 2\n"), "%s", text);
        ck_assert_msg(strstr(text, "stem = 16\n"), "%s", text);
        ck_assert_msg(!two || strstr(why, "patch 1 makes a 14x14 grid of stem2's 14x14 map"),
                      "%s", why);
        ck_assert_int_eq(vit_config_check(&c), VIT_OK);
    }
}
END_TEST
#undef STEMS

/* A Swin written by torchvision (tools/torch_swin_fixture.py: every
 * parameter random, torchvision's names and layouts, the config in its
 * metadata) loads through vit_safetensors_load and gives torchvision's
 * float64 logits on its 4 images, to rounding.  _i = 1: the --wide
 * fixture, 8x16 images whose second stage (a 2x4 grid in windows of 2)
 * torchvision shifts by 0 rows and 1 column.  _i = 2: the --rect fixture,
 * 8x12 images in torchvision's windows of [2, 3] (window_w 3 in its
 * metadata): a 4x6 grid shifted by 1 row and 1 column, tables [15, 2]. */
START_TEST(test_swin_torchvision_fixture)
{
    static const char *const stem[3] = {"data/swin_torch", "data/swin_torch_wide",
                                        "data/swin_torch_rect"};
    char path[64];
    vit_model *m = NULL;
    snprintf(path, sizeof path, "%s.safetensors", stem[_i]);
    ck_assert_msg(vit_safetensors_load(path, &m) == VIT_OK, "%s", vit_last_error());
    ck_assert_str_eq(vit_config_arch(vit_model_config(m))->name, "swin");
    snprintf(path, sizeof path, "%s_logits.txt", stem[_i]);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    int B, H, W, C, K;
    ck_assert_int_eq(fscanf(f, "%d %d %d %d %d", &B, &H, &W, &C, &K), 5);
    static const int width[3] = {8, 16, 12};
    ck_assert(B == 4 && H == 8 && W == width[_i] && C == 2 && K == 3);
    vit_real *images = gc_zeros((size_t)B * H * W * C), *want = gc_zeros((size_t)B * K);
    for (int i = 0; i < B * H * W * C; i++) {
        double v;
        ck_assert_int_eq(fscanf(f, "%lf", &v), 1);
        images[i] = (vit_real)(float)v; /* the float32 pixel the 9 digits name */
    }
    for (int i = 0; i < B * K; i++) {
        double v;
        ck_assert_int_eq(fscanf(f, "%lf", &v), 1);
        want[i] = (vit_real)v;
    }
    fclose(f);
    vit_tape *t = vit_tape_new();
    vit_tensor *z = vit_model_forward(m, t, images, B, 0);
    ck_assert_msg(z != NULL, "%s", vit_last_error());
    double diff = gc_max_abs_diff(z->data, want, (size_t)B * K), big = 0;
    for (int i = 0; i < B * K; i++)
        big = fmax(big, fabs((double)want[i]));
    printf("swin %dx%d vs torchvision: max |logit difference| %.3g (largest |logit| %.3g)\n",
           H, W, diff, big);
    ck_assert_msg(big > 0.1, "the fixture's logits are too small to tell anything");
    ck_assert_msg(diff < 1e-12, "logits differ from torchvision's by %g", diff);
    vit_tape_free(t);
    free(images);
    free(want);
    vit_model_free(m);
}
END_TEST

/* ---- attention maps (vit_model_attention_maps) ----------------------------- */

/* The model's tensor named name (its index), failing the test when absent. */
static int tensor_ix(const vit_model *m, const char *name)
{
    for (int i = 0; i < vit_model_tensor_count(m); i++)
        if (strcmp(vit_model_tensor_at(m, i)->name, name) == 0)
            return i;
    ck_abort_msg("no tensor %s", name);
    return -1;
}

static vit_real *values_of(vit_model *m, const char *name)
{
    return vit_model_params(m) + vit_model_tensor_at(m, tensor_ix(m, name))->offset;
}

static vit_tensor *leaf_of(vit_model *m, vit_tape *t, const char *name)
{
    const vit_model_tensor *mt = vit_model_tensor_at(m, tensor_ix(m, name));
    return vit_tape_leaf(t, vit_model_params(m) + mt->offset, NULL, mt->ndim, mt->shape);
}

/* Block (s, j)'s softmax weights of image b, head h, query token i over
 * key token k of a gh x gw grid, from scratch in double: LN1 of the block's
 * input x [N, C] (eps 1e-5, the biased variance), Q and K of qkv.w and
 * qkv.b, scores q.k / sqrt(d) plus the relative position table's row for
 * the two tokens' ORIGINAL row and column offsets (they are neighbours
 * inside a window), over the keys vit_mask_window allows; ref [N, N]. */
static void reference_weights(vit_model *m, int s, int j, const vit_real *x, int gh, int gw,
                              int C, int H, int Mh, int Mw, const unsigned char *allowed,
                              int h, double *ref)
{
    char name[64];
    const int N = gh * gw, d = C / H;
#define BLOCK_VALUES(row) (snprintf(name, sizeof name, "%d.%d.%s", s, j, row), values_of(m, name))
    const vit_real *g = BLOCK_VALUES("ln1.g"), *be = BLOCK_VALUES("ln1.b");
    const vit_real *W = BLOCK_VALUES("qkv.w"), *bq = BLOCK_VALUES("qkv.b");
    const vit_real *rel = BLOCK_VALUES("rel");
#undef BLOCK_VALUES
    double *q = malloc(sizeof *q * N * d), *k = malloc(sizeof *k * N * d), *ln = malloc(sizeof *ln * C);
    for (int t = 0; t < N; t++) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++)
            mean += x[t * C + c];
        mean /= C;
        for (int c = 0; c < C; c++)
            var += (x[t * C + c] - mean) * (x[t * C + c] - mean);
        var /= C;
        for (int c = 0; c < C; c++)
            ln[c] = (x[t * C + c] - mean) / sqrt(var + 1e-5) * g[c] + be[c];
        for (int e = 0; e < d; e++) {
            double sq = bq[h * d + e], sk = bq[C + h * d + e];
            for (int c = 0; c < C; c++) {
                sq += ln[c] * W[c * 3 * C + h * d + e];
                sk += ln[c] * W[c * 3 * C + C + h * d + e];
            }
            q[t * d + e] = sq;
            k[t * d + e] = sk;
        }
    }
    for (int i = 0; i < N; i++) {
        double mx = -INFINITY, sum = 0;
        for (int t = 0; t < N; t++) {
            ref[i * N + t] = -INFINITY;
            if (!allowed[i * N + t])
                continue;
            double sc = 0;
            for (int e = 0; e < d; e++)
                sc += q[i * d + e] * k[t * d + e];
            int dy = i / gw - t / gw, dx = i % gw - t % gw;
            ck_assert(abs(dy) < Mh && abs(dx) < Mw); /* neighbours, never across a wrap */
            sc = sc / sqrt((double)d) + rel[((dy + Mh - 1) * (2 * Mw - 1) + dx + Mw - 1) * H + h];
            ref[i * N + t] = sc;
            mx = fmax(mx, sc);
        }
        for (int t = 0; t < N; t++)
            sum += allowed[i * N + t] ? exp(ref[i * N + t] - mx) : 0;
        for (int t = 0; t < N; t++)
            ref[i * N + t] = allowed[i * N + t] ? exp(ref[i * N + t] - mx) / sum : 0;
    }
    free(q);
    free(k);
    free(ln);
}

/* A Swin's maps, layer by layer (its blocks, stage by stage), against the
 * softmax weights made from scratch (reference_weights) over the block's
 * input, on tiny (4x4 grid, windows of 2, block 1 shifted by 1 row and
 * column, then a 2x2 grid) and _i = 1 tiny_of's wide 2 (4x6 in 2x3
 * windows, shifted by 1 and 1, then 2x3): every row of every head within
 * 1e-12, exactly 0 outside the query's window, summing to 1.  The block
 * inputs are known because every block's proj and fc2 are zeroed (each
 * residual branch adds exactly 0): stage 0's is the patch embedding's
 * layer norm, stage 1's that merged, normed and mapped.  First, on the
 * random model, the maps leave the logits' bits alone: vit_model_forward
 * (maps kept) against vit_model_logits (none). */
START_TEST(test_swin_attention_maps)
{
    enum { B = 2 };
    vit_config c;
    tiny_of(&c, _i ? 2 : 0);
    const int W = _i ? 12 : 8, gh0 = 4, gw0 = W / 2, Mh = 2, Mw = _i ? 3 : 2;
    vit_model *m = vit_model_new(&c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    vit_rng rng;
    vit_rng_seed(&rng, 11);
    vit_model_init(m, &rng);
    vit_real *p = vit_model_params(m);
    for (size_t i = 0; i < vit_model_param_count(m); i++) /* every tensor of order one */
        p[i] = (vit_real)(vit_rng_uniform(&rng) - 0.5);
    size_t npx = (size_t)B * 8 * W * 2;
    vit_real *img = malloc(npx * sizeof *img);
    for (size_t i = 0; i < npx; i++)
        img[i] = (vit_real)vit_rng_uniform(&rng);

    ck_assert_int_eq(vit_model_info(m)->attn_layers, NBLOCKS);
    static const char *const labels[NBLOCKS] = {"stage 1 block 1", "stage 1 block 2, shifted",
                                                "stage 2 block 1", "stage 2 block 2"};
    for (int l = 0; l < NBLOCKS; l++) {
        const vit_arch_attn *a = vit_model_attention_layer(m, l);
        ck_assert_int_eq(a->heads, 2);
        ck_assert_int_eq(a->grid_h, gh0 >> (l / 2));
        ck_assert_int_eq(a->grid_w, gw0 >> (l / 2));
        ck_assert_int_eq(a->queries, a->grid_h * a->grid_w);
        ck_assert_int_eq(a->keys, a->queries);
        ck_assert_int_eq(a->first, 0);
        ck_assert_int_eq(a->cls, 0);
        ck_assert_int_eq(a->stage, l / 2);
        ck_assert_str_eq(a->label, labels[l]);
    }

    /* Maps asked for or not: the same logits, bit for bit.  Without maps:
     * the arch's forward run by hand on a copy of the model's tensors, in
     * evaluation (no grad) and with gradients (training's mode). */
    const vit_arch *a = vit_model_arch(m);
    vit_params *P = vit_params_new();
    void *state = NULL;
    ck_assert_msg(a->build(&c, P, &state) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(vit_params_alloc(P), VIT_OK);
    ck_assert_uint_eq(vit_params_count(P), vit_model_param_count(m));
    memcpy(vit_params_values(P), p, vit_params_count(P) * sizeof *p);
    vit_tape *t1 = vit_tape_new(), *t2 = vit_tape_new(), *t3 = vit_tape_new();
    const size_t nz = (size_t)B * 3 * sizeof(vit_real);
    const vit_real *kept[NBLOCKS];
    vit_real zs[2][2][B * 3];
    for (int grad = 0; grad < 2; grad++)
        for (int with_maps = 0; with_maps < 2; with_maps++) {
            vit_tape *t = with_maps ? t2 : t1;
            vit_tape_reset(t);
            vit_tape_set_grad(t, grad);
            for (int l = 0; l < NBLOCKS; l++)
                kept[l] = NULL;
            vit_arch_run r = {.cfg = &c, .state = state, .params = P, .tape = t,
                              .images = vit_tape_leaf(t, img, NULL, 4, (int[]){B, 8, W, 2}),
                              .batch = B, .grads = grad ? vit_params_grads(P) : NULL,
                              .maps = with_maps ? kept : NULL};
            vit_tensor *z = a->forward(&r);
            ck_assert_msg(z != NULL, "%s", vit_last_error());
            memcpy(zs[grad][with_maps], z->data, nz);
            for (int l = 0; l < NBLOCKS; l++)
                ck_assert(with_maps ? kept[l] != NULL : kept[l] == NULL);
        }
    ck_assert_mem_eq(zs[0][0], zs[0][1], nz);
    ck_assert_mem_eq(zs[1][0], zs[1][1], nz);
    a->release(state);
    vit_params_free(P);
    /* and through the model: vit_model_forward keeps maps, the same logits */
    vit_tape_reset(t1);
    vit_tape_set_grad(t1, 1);
    vit_tensor *zm = vit_model_forward(m, t1, img, B, 0);
    ck_assert_msg(zm != NULL, "%s", vit_last_error());
    ck_assert_mem_eq(zm->data, zs[0][0], nz);
    for (int l = 0; l < NBLOCKS; l++)
        ck_assert_ptr_nonnull(vit_model_attention_maps(m, l));

    /* Zero every block's proj and fc2: each block passes its input on. */
    char name[64];
    for (int s = 0; s < 2; s++)
        for (int j = 0; j < 2; j++) {
            static const char *const rows[] = {"proj.w", "proj.b", "fc2.w", "fc2.b"};
            for (int r = 0; r < 4; r++) {
                snprintf(name, sizeof name, "%d.%d.%s", s, j, rows[r]);
                const vit_model_tensor *mt = vit_model_tensor_at(m, tensor_ix(m, name));
                memset(p + mt->offset, 0, mt->size * sizeof *p);
            }
        }
    vit_tape_reset(t2);
    ck_assert_ptr_nonnull(vit_model_forward(m, t2, img, B, 0));
    /* The blocks' inputs, from the public ops. */
    vit_tape_set_grad(t3, 0);
    vit_patch_shape ps = {.batch = B, .height = 8, .width = W, .channels = 2, .patch = 2,
                          .dim = 4, .stride = 2};
    vit_tensor *x0 = vit_op_patch_embed(t3, &ps, vit_tape_leaf(t3, img, NULL, 4,
                                                               (int[]){B, 8, W, 2}),
                                        leaf_of(m, t3, "patch.w"), leaf_of(m, t3, "patch.b"));
    x0 = vit_op_layernorm(t3, x0, leaf_of(m, t3, "patch.ln.g"), leaf_of(m, t3, "patch.ln.b"),
                          (vit_real)1e-5);
    vit_tensor *x1 = vit_op_patch_merge(t3, x0, gh0, gw0);
    x1 = vit_op_layernorm(t3, x1, leaf_of(m, t3, "0.merge.ln.g"), leaf_of(m, t3, "0.merge.ln.b"),
                          (vit_real)1e-5);
    x1 = vit_op_linear(t3, x1, leaf_of(m, t3, "0.merge.w"), NULL);
    ck_assert_msg(x0 && x1, "%s", vit_last_error());

    for (int l = 0; l < NBLOCKS; l++) {
        const int s = l / 2, j = l % 2, gh = gh0 >> s, gw = gw0 >> s, N = gh * gw, C = 4 << s;
        const int sh = j && Mh < gh ? Mh / 2 : 0, sw = j && Mw < gw ? Mw / 2 : 0;
        const vit_real *maps = vit_model_attention_maps(m, l), *x = (s ? x1 : x0)->data;
        unsigned char *allowed = malloc((size_t)N * N);
        double *ref = malloc(sizeof *ref * N * N);
        ck_assert_int_eq(vit_mask_window(allowed, gh, gw, Mh, Mw, sh, sw), VIT_OK);
        double worst = 0;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < 2; h++) {
                reference_weights(m, s, j, x + (size_t)b * N * C, gh, gw, C, 2, Mh, Mw,
                                  allowed, h, ref);
                for (int i = 0; i < N; i++) {
                    const vit_real *row = maps + (((size_t)b * 2 + h) * N + i) * N;
                    double sum = 0;
                    for (int k = 0; k < N; k++) {
                        if (!allowed[i * N + k]) {
                            ck_assert_msg(row[k] == 0, "layer %d item %d head %d query %d: "
                                          "key %d outside the window has %g", l, b, h, i, k,
                                          (double)row[k]);
                            continue;
                        }
                        sum += row[k];
                        worst = fmax(worst, fabs(row[k] - ref[i * N + k]));
                    }
                    ck_assert_msg(fabs(sum - 1) < 1e-12, "layer %d item %d head %d query %d: "
                                  "the window's weights sum to %.15f", l, b, h, i, sum);
                }
            }
        printf("swin maps layer %d (%dx%d grid, shift %d,%d): worst |map - reference| %.3g\n",
               l, gh, gw, sh, sw, worst);
        ck_assert_msg(worst < 1e-12, "layer %d: maps differ from the softmax weights by %g", l,
                      worst);
        free(allowed);
        free(ref);
    }
    vit_tape_free(t1);
    vit_tape_free(t2);
    vit_tape_free(t3);
    free(img);
    vit_model_free(m);
}
END_TEST

static Suite *swin_suite(void)
{
    Suite *s = suite_create("swin");
    TCase *tg = tcase_create("gradient");
    tcase_set_timeout(tg, 120);
    tcase_add_loop_test(tg, test_swin_gradient, 0, 8);
    suite_add_tcase(s, tg);
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, test_swin_rejects_bad_configs);
    tcase_add_test(tc, test_swin_rejects_bad_stems);
    tcase_add_test(tc, test_swin_stem_macs);
    tcase_add_test(tc, test_swin_old_config_no_stem);
    tcase_add_test(tc, test_swin_window_w_follows);
    tcase_add_test(tc, test_swin_recipe);
    tcase_add_test(tc, test_swin_recipe_keeps_square);
    tcase_add_loop_test(tc, test_swin_torchvision_fixture, 0, 3);
    tcase_add_loop_test(tc, test_swin_attention_maps, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    vit_set_threads(1);
    SRunner *sr = srunner_create(swin_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
