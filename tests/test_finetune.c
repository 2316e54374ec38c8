/*
 * tests/test_finetune.c - vit/finetune.h: a timm VisionTransformer file
 * written by PyTorch (tools/torch_make_timm_fixture.py: timm's names and
 * order, metadata {"format": "pt"} alone) read and checked against
 * PyTorch's logits at 224 and, with the position embeddings resampled, at
 * 112; the resampling against F.interpolate; the round trip import ->
 * export bitwise; the channel and head adaptation; every refusal.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_util.h"
#include "vit/vit.h"

#define TIMM "data/timm_vit.safetensors"
#define REF "data/timm_vit_ref.txt"

/* Reference tensor `name` of REF: its values (malloc'd), count in *n. */
static double *ref(const char *name, int *n)
{
    FILE *f = fopen(REF, "r");
    ck_assert_msg(f != NULL, "cannot open %s", REF);
    char key[64];
    int count;
    double *v = NULL;
    while (fscanf(f, "%63s %d", key, &count) == 2) {
        double *vals = malloc((size_t)count * sizeof *vals);
        ck_assert_ptr_nonnull(vals);
        for (int i = 0; i < count; i++)
            ck_assert_int_eq(fscanf(f, "%lf", &vals[i]), 1);
        if (strcmp(key, name) == 0) {
            v = vals;
            *n = count;
            break;
        }
        free(vals);
    }
    fclose(f);
    ck_assert_msg(v != NULL, "%s lacks %s", REF, name);
    return v;
}

/* The fixture script's images: xorshift32, [n, h, w, c] in [0, 1]. */
static void images(uint32_t *s, vit_real *x, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        *s ^= *s << 13;
        *s ^= *s >> 17;
        *s ^= *s << 5;
        x[i] = (vit_real)((double)(*s >> 24) / 255.0);
    }
}

static vit_model *timm_model(void)
{
    vit_model *m = NULL;
    ck_assert_msg(vit_timm_load(TIMM, NULL, 2, &m) == VIT_OK, "%s", vit_last_error());
    return m;
}

static void fold_imagenet(vit_model *m)
{
    const double mean[3] = VIT_IMAGENET_MEAN, std[3] = VIT_IMAGENET_STD;
    ck_assert_msg(vit_model_fold_input_norm(m, mean, std) == VIT_OK, "%s", vit_last_error());
}

/* n gray values from seed s into g, and the same as three equal channels
 * into g3 [n * 3]. */
static void gray_and_rgb(uint32_t s, vit_real *g, vit_real *g3, size_t n)
{
    images(&s, g, n);
    for (size_t i = 0; i < n; i++)
        g3[3 * i] = g3[3 * i + 1] = g3[3 * i + 2] = g[i];
}

/* m's logits of x [b, ...] against want [b * classes] within tol. */
static void expect_logits(vit_model *m, const vit_real *x, int b, const double *want, double tol,
                          const char *what)
{
    vit_tape *tape = vit_tape_new();
    vit_tensor *y = vit_model_forward(m, tape, x, b, 0);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    double worst = 0;
    for (size_t i = 0; i < y->size; i++)
        worst = fmax(worst, fabs((double)y->data[i] - want[i]));
    ck_assert_msg(worst <= tol, "%s: logits differ from PyTorch's by %.3g (> %g)", what, worst,
                  tol);
    vit_tape_free(tape);
}

START_TEST(config_from_shapes)
{
    vit_model *m = timm_model();
    const vit_config *c = vit_model_config(m);
    ck_assert_int_eq(c->dim, 32);
    ck_assert_int_eq(c->depth, 2);
    ck_assert_int_eq(c->heads, 2);
    ck_assert_int_eq(c->mlp, 128);
    ck_assert_int_eq(c->patch, 16);
    ck_assert_int_eq(c->image_height, 224);
    ck_assert_int_eq(c->image_width, 224);
    ck_assert_int_eq(c->channels, 3);
    ck_assert_int_eq(c->classes, 5);
    ck_assert_int_eq(c->pool, VIT_POOL_CLS);
    ck_assert(c->ln_eps == 1e-6);
    vit_model_free(m);
}
END_TEST

/* 32 images at 224, ImageNet's normalisation folded into the patches. */
START_TEST(logits_224)
{
    vit_model *m = timm_model();
    fold_imagenet(m);
    int n;
    double *want = ref("logits224", &n);
    ck_assert_int_eq(n, 32 * 5);
    size_t count = (size_t)32 * 224 * 224 * 3;
    vit_real *x = malloc(count * sizeof *x);
    ck_assert_ptr_nonnull(x);
    uint32_t s = 2463534242u;
    images(&s, x, count);
    expect_logits(m, x, 32, want, 1e-4, "224");
    free(x);
    free(want);
    vit_model_free(m);
}
END_TEST

/* The same model at 112 (a 7x7 grid): pos_embed resampled bicubically. */
START_TEST(logits_112_resampled)
{
    vit_model *src = timm_model();
    fold_imagenet(src);
    vit_config t = *vit_model_config(src);
    t.image_height = t.image_width = 112;
    vit_adapt_opts o = {.keep_head = 1};
    vit_rng rng;
    vit_rng_seed(&rng, 1);
    vit_model *m = NULL;
    char note[256];
    ck_assert_msg(vit_model_adapt(src, &t, &o, &rng, &m, note, sizeof note) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_msg(strstr(note, "14x14 -> 7x7") && strstr(note, "head kept"), "note: %s", note);
    int n;
    double *want = ref("logits112", &n);
    size_t c224 = (size_t)32 * 224 * 224 * 3, c112 = (size_t)32 * 112 * 112 * 3;
    vit_real *x = malloc(c224 * sizeof *x);
    ck_assert_ptr_nonnull(x);
    uint32_t s = 2463534242u;
    images(&s, x, c224); /* the 224 set first, as the script draws them */
    images(&s, x, c112);
    expect_logits(m, x, 32, want, 1e-4, "112");
    free(x);
    free(want);
    vit_model_free(m);
    vit_model_free(src);
}
END_TEST

static void expect_resample(const double *src, int nh, int nw, const char *name)
{
    int n;
    double *want = ref(name, &n);
    ck_assert_int_eq(n, (1 + nh * nw) * 3);
    vit_real in[17 * 3], *out = malloc((size_t)n * sizeof *out);
    ck_assert_ptr_nonnull(out);
    for (int i = 0; i < 17 * 3; i++)
        in[i] = (vit_real)src[i];
    ck_assert_int_eq(vit_pos_resample(in, 1, 4, 4, 3, out, nh, nw), VIT_OK);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs((double)out[i] - want[i]) <= 1e-6 * fmax(1, fabs(want[i])),
                      "%s value %d: ours %.9g, F.interpolate %.9g", name, i, (double)out[i],
                      want[i]);
    free(out);
    free(want);
}

START_TEST(resample_matches_interpolate)
{
    int n;
    double *src = ref("pos_src", &n);
    ck_assert_int_eq(n, 17 * 3);
    expect_resample(src, 3, 5, "pos_3x5"); /* down one way, up the other */
    expect_resample(src, 6, 7, "pos_6x7");
    vit_real in[17 * 3], out[17 * 3];
    for (int i = 0; i < 17 * 3; i++)
        in[i] = (vit_real)src[i];
    /* the same grid: the identity */
    ck_assert_int_eq(vit_pos_resample(in, 1, 4, 4, 3, out, 4, 4), VIT_OK);
    for (int i = 0; i < 17 * 3; i++)
        ck_assert_msg(fabs((double)out[i] - (double)in[i]) <= 1e-6, "identity value %d", i);
    ck_assert_int_eq(vit_pos_resample(in, -1, 4, 4, 3, out, 4, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_pos_resample(NULL, 1, 4, 4, 3, out, 4, 4), VIT_EINVAL);
    free(src);
}
END_TEST

/* Import -> export: the same tensor bytes in the same order. */
START_TEST(round_trip_bitwise)
{
    vit_model *m = timm_model();
    const char *out = fu_path("back.safetensors");
    ck_assert_msg(vit_safetensors_save(m, NULL, NULL, out, NULL) == VIT_OK, "%s", vit_last_error());
    size_t na, nb;
    unsigned char *a = fu_read(TIMM, &na), *b = fu_read(out, &nb);
    uint64_t ha = 0, hb = 0;
    for (int k = 7; k >= 0; k--) {
        ha = ha << 8 | a[k];
        hb = hb << 8 | b[k];
    }
    ck_assert_uint_eq(na - 8 - ha, nb - 8 - hb);
    ck_assert_msg(memcmp(a + 8 + ha, b + 8 + hb, na - 8 - ha) == 0,
                  "the export's tensor data differ from the timm file's");
    /* and the export reads back as the same model, ln_eps included */
    vit_model *back = NULL;
    ck_assert_msg(vit_safetensors_load(out, &back) == VIT_OK, "%s", vit_last_error());
    ck_assert(vit_model_config(back)->ln_eps == 1e-6);
    ck_assert(memcmp(vit_model_params(back), vit_model_params(m),
                     vit_model_param_count(m) * sizeof(vit_real)) == 0);
    vit_model_free(back);
    free(a);
    free(b);
    vit_model_free(m);
}
END_TEST

/* 3 -> 1 channel: the gray model on g computes what the RGB model does on
 * (g, g, g); and 1 -> 3 back computes it again on (g, g, g). */
START_TEST(channels_adapted)
{
    vit_model *rgb = timm_model();
    fold_imagenet(rgb);
    vit_config t = *vit_model_config(rgb);
    t.channels = 1;
    vit_adapt_opts keep = {.keep_head = 1};
    vit_rng rng;
    vit_rng_seed(&rng, 1);
    vit_model *gray = NULL, *again = NULL;
    char note[256];
    ck_assert_msg(vit_model_adapt(rgb, &t, &keep, &rng, &gray, note, sizeof note) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_msg(strstr(note, "3 -> 1 channels"), "note: %s", note);
    t.channels = 3;
    ck_assert_msg(vit_model_adapt(gray, &t, &keep, &rng, &again, note, sizeof note) == VIT_OK,
                  "%s", vit_last_error());
    enum { B = 2, HW = 224 * 224 };
    vit_real *g = malloc((size_t)B * HW * sizeof *g), *g3 = malloc((size_t)B * HW * 3 * sizeof *g3);
    ck_assert(g && g3);
    gray_and_rgb(99, g, g3, (size_t)B * HW);
    vit_tape *tape = vit_tape_new();
    vit_tensor *y = vit_model_forward(rgb, tape, g3, B, 0);
    ck_assert_ptr_nonnull(y);
    double want[B * 5];
    for (int i = 0; i < B * 5; i++)
        want[i] = (double)y->data[i];
    vit_tape_free(tape);
    expect_logits(gray, g, B, want, 1e-4, "gray (summed channels)");
    expect_logits(again, g3, B, want, 1e-4, "1 -> 3 (repeated / 3)");
    free(g);
    free(g3);
    vit_model_free(rgb);
    vit_model_free(gray);
    vit_model_free(again);
}
END_TEST

/* A new head for new classes: everything else copied bitwise. */
START_TEST(new_head)
{
    vit_model *src = timm_model();
    vit_config t = *vit_model_config(src);
    t.classes = 10;
    vit_adapt_opts o = {.keep_head = 0};
    vit_rng rng;
    vit_rng_seed(&rng, 3);
    vit_model *m = NULL;
    char note[256];
    ck_assert_int_eq(vit_model_adapt(src, &t, &o, &rng, &m, note, sizeof note), VIT_OK);
    ck_assert_msg(strstr(note, "new head (10 classes)"), "note: %s", note);
    int heads = 0;
    for (int i = 0; i < vit_model_tensor_count(m); i++) {
        const vit_model_tensor *a = vit_model_tensor_at(m, i), *b = vit_model_tensor_at(src, i);
        ck_assert_str_eq(a->name, b->name);
        const vit_real *pa = vit_model_params(m) + a->offset,
                       *pb = vit_model_params(src) + b->offset;
        if (strncmp(a->name, "head.", 5) == 0) {
            heads++;
            continue;
        }
        ck_assert_msg(memcmp(pa, pb, a->size * sizeof *pa) == 0, "%s changed", a->name);
    }
    ck_assert_int_eq(heads, 2);
    const vit_model_tensor *hw = vit_model_tensor_at(m, vit_model_tensor_count(m) - 2);
    ck_assert_int_eq(hw->shape[1], 10);
    double sq = 0;
    for (size_t i = 0; i < hw->size; i++)
        sq += (double)vit_model_params(m)[hw->offset + i] * vit_model_params(m)[hw->offset + i];
    ck_assert_msg(sq > 0, "the new head is not drawn");
    vit_model_free(m);
    /* kept: the classes must agree */
    o.keep_head = 1;
    ck_assert_int_eq(vit_model_adapt(src, &t, &o, &rng, &m, NULL, 0), VIT_EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "5 classes and the data 10"));
    t.classes = 5;
    t.channels = 2;
    ck_assert_int_eq(vit_model_adapt(src, &t, &o, &rng, &m, NULL, 0), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "3 channels, the data has 2"));
    t.channels = 3;
    t.dim = 64;
    ck_assert_int_eq(vit_model_adapt(src, &t, &o, &rng, &m, NULL, 0), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "architecture"));
    vit_model_free(src);
}
END_TEST

/* A padded first layer cannot take the normalisation. */
START_TEST(fold_refuses_padding)
{
    vit_config c;
    vit_config_default(&c); /* patch_pad 1 */
    vit_model *m = vit_model_new(&c);
    const double mean[1] = {0.5}, std[1] = {0.25}, bad[1] = {0};
    ck_assert_int_eq(vit_model_fold_input_norm(m, mean, std), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "patch_pad"));
    vit_model_free(m);
    c.patch_pad = 0;
    c.patch_stride = 0;
    c.patch = 2;
    m = vit_model_new(&c);
    ck_assert_int_eq(vit_model_fold_input_norm(m, mean, bad), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "std must be positive"));
    vit_model_free(m);
}
END_TEST

/* Each edit of the fixture's header refused by vit_timm_load with a message
 * naming the tensor and the problem. */
START_TEST(refusals)
{
    static const struct {
        const char *from, *to, *arch, *want[2];
        int heads, rc;
    } cases[] = {
        {"\"head.weight\"", "\"head_dist.weight\"", NULL, {"head_dist.weight", "distill"}, 2,
         VIT_EFORMAT},
        {"\"cls_token\"", "\"dist_token\"", NULL, {"dist_token", "distill"}, 2, VIT_EFORMAT},
        {"\"cls_token\"", "\"reg_token\"", NULL, {"reg_token", "register"}, 2, VIT_EFORMAT},
        {"\"cls_token\"", "\"cls_tokens\"", NULL, {"'cls_token'", "class_token=False"}, 2,
         VIT_EFORMAT},
        {"\"norm.weight\"", "\"fc_norm.weight\"", NULL, {"fc_norm", "global_pool='avg'"}, 2,
         VIT_EFORMAT},
        {"\"blocks.0.norm1.bias\"", "\"blocks.0.ls1.gamma\"", NULL, {"ls1.gamma", "layer scale"},
         2, VIT_EFORMAT},
        {"\"blocks.0.norm1.bias\"", "\"norm_pre.weight\"", NULL, {"norm_pre", "pre_norm"}, 2,
         VIT_EFORMAT},
        {"\"head.weight\"", "\"head.w\"", NULL, {"'head.weight'", "num_classes=0"}, 2,
         VIT_EFORMAT},
        /* one line per mismatch: the missing tensor and the stranger */
        {"\"blocks.1.attn.proj.bias\"", "\"blocks.1.attn.proj.b\"", NULL,
         {"'blocks.1.attn.proj.bias' is missing\n  unexpected tensor 'blocks.1.attn.proj.b'",
          NULL}, 2, VIT_EFORMAT},
        {"\"blocks.0.norm1.bias\":{\"dtype\":\"F32\",\"shape\":[32]",
         "\"blocks.0.norm1.bias\":{\"dtype\":\"F32\",\"shape\":[2,16]", NULL,
         {"'blocks.0.norm1.bias' has shape [2, 16], the config needs [32]", NULL}, 2,
         VIT_EFORMAT},
        {"\"pos_embed\":{\"dtype\":\"F32\",\"shape\":[1,197,32]",
         "\"pos_embed\":{\"dtype\":\"F32\",\"shape\":[1,196,32]", NULL,
         {"196 rows, a square grid's alone", "no_embed_class=True"}, 2, VIT_EFORMAT},
        {"\"head.bias\":{\"dtype\":\"F32\"", "\"head.bias\":{\"dtype\":\"F16\"", NULL,
         {"'head.bias' has dtype F16", NULL}, 2, VIT_EFORMAT},
        {"\"format\":\"pt\"", "\"format\":\"pt\"", "vit_tiny_patch16_224",
         {"not a vit_tiny_patch16_224: dim 32 (the file) vs 192", "depth 2 (the file) vs 12"}, 0,
         VIT_EFORMAT},
        {"\"format\":\"pt\"", "\"format\":\"pt\"", "vit_huge", {"unknown arch 'vit_huge'",
         "deit_tiny_patch16_224"}, 0, VIT_EINVAL},
        {"\"format\":\"pt\"", "\"format\":\"pt\"", NULL, {"do not tell the number of heads",
         "vit_tiny_patch16_224"}, 0, VIT_EINVAL},
        {"\"format\":\"pt\"", "\"format\":\"pt\"", NULL, {"heads", NULL}, 3, VIT_EFORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s", fu_path("bad.safetensors"));
        fu_edit_header(TIMM, path, cases[i].from, cases[i].to);
        vit_model *m = (vit_model *)&m;
        int rc = vit_timm_load(path, cases[i].arch, cases[i].heads, &m);
        ck_assert_msg(rc == cases[i].rc, "case %zu: %d (%s)", i, rc, vit_last_error());
        ck_assert_ptr_null(m);
        for (int k = 0; k < 2; k++)
            ck_assert_msg(!cases[i].want[k] || strstr(vit_last_error(), cases[i].want[k]),
                          "case %zu: \"%s\" does not say \"%s\"", i, vit_last_error(),
                          cases[i].want[k]);
    }
    ck_assert_int_eq(vit_timm_load("data/no-such.safetensors", NULL, 2, &(vit_model *){NULL}),
                     VIT_EIO);
}
END_TEST

START_TEST(arch_table)
{
    const vit_timm_arch *a = vit_timm_arch_find("vit_small_patch16_384");
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->dim, 384);
    ck_assert_int_eq(a->heads, 6);
    ck_assert_int_eq(a->image, 384);
    ck_assert_ptr_null(vit_timm_arch_find("vit_small_patch16_385"));
    int n = 0;
    while (vit_timm_arch_at(n))
        ck_assert_int_eq(vit_timm_arch_at(n++)->dim / 64, vit_timm_arch_at(n - 1)->heads);
    ck_assert_int_ge(n, 9);
}
END_TEST


/* ---- the trainer: vit_train_opts.init_from ------------------------------ */

#define DIGITS "../data/digits.csv.gz"

static vit_dataset g_train, g_test;

/* Digits: 96 training images, 64 test images (a run takes a moment). */
static void digits(vit_dataset *train, vit_dataset *test)
{
    if (!g_train.count)
        ck_assert_msg(vit_data_load_digits(DIGITS, 1437, &g_train, &g_test) == VIT_OK, "%s",
                      vit_last_error());
    *train = g_train;
    train->count = 96;
    *test = g_test;
    test->count = 64;
}

static void small_config(vit_config *c, vit_train_config *tc)
{
    vit_config_default(c);
    vit_train_config_default(tc);
    c->patch = 2;
    c->patch_stride = 0;
    c->patch_pad = 0;
    tc->tta = VIT_TTA_NONE;
    c->dim = 16;
    c->depth = 2;
    c->heads = 2;
    c->mlp = 32;
    tc->epochs = 1;
    tc->batch = 32;
    tc->seed = 5;
    c->image_height = c->image_width = 8;
    c->channels = 1;
    c->classes = 10;
}

/* A trained-looking source: random weights, exported as ours. */
static vit_model *source(const char *path)
{
    vit_config c;
    vit_train_config tc;
    small_config(&c, &tc);
    vit_model *m = vit_model_new(&c);
    vit_rng rng;
    vit_rng_seed(&rng, 11);
    vit_model_init(m, &rng);
    ck_assert_msg(vit_safetensors_save(m, NULL, NULL, path, NULL) == VIT_OK, "%s", vit_last_error());
    return m;
}

static unsigned long long fnv_file(const char *path)
{
    size_t n;
    unsigned char *b = fu_read(path, &n);
    unsigned long long h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    free(b);
    return h;
}

/* Trains one epoch from src_path with o's fine-tuning fields into dir and
 * returns the checkpoint's model, its run data in rec. */
static vit_model *finetuned(const char *src_path, vit_train_opts o, const char *dir,
                            vit_run_data *rec)
{
    vit_dataset train, test;
    digits(&train, &test);
    vit_config cfg;
    vit_train_config tc;
    small_config(&cfg, &tc);
    cfg.dim = 8; /* the file's architecture wins over the config's */
    cfg.heads = 4;
    o.out_dir = dir;
    o.ckpt_every = 1;
    o.init_from = src_path;
    vit_train_result res;
    ck_assert_msg(vit_train_run(&cfg, &tc, &train, &test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    vit_train_result_free(&res);
    char ck[700];
    snprintf(ck, sizeof ck, "%s/last.ckpt", dir);
    int known = 0;
    ck_assert_int_eq(vit_run_data_read(ck, rec, &known), VIT_OK);
    ck_assert_int_eq(known, 1);
    vit_model *m = NULL;
    ck_assert_msg(vit_run_load(ck, &m, NULL, NULL, NULL) == VIT_OK, "%s", vit_last_error());
    return m;
}

/* Tensor i of a and b: 1 if bitwise equal. */
static int same_tensor(vit_model *a, vit_model *b, int i)
{
    const vit_model_tensor *ta = vit_model_tensor_at(a, i), *tb = vit_model_tensor_at(b, i);
    ck_assert_str_eq(ta->name, tb->name);
    return memcmp(vit_model_params(a) + ta->offset, vit_model_params(b) + tb->offset,
                  ta->size * sizeof(vit_real)) == 0;
}

/* Fine-tunes from a new source at src (file name) with o into dir (as
 * finetuned) and compares each tensor of the result with the source's:
 * want(name) 1 for one that must stay bitwise, -1 for one that must move,
 * 0 for either.  The first tensor that does not gets into bad (empty when
 * none), and both models are freed before the caller asserts, so that a
 * failure (run alone outside tests/, the data is not found) loses
 * nothing under CK_FORK=no.  The trained model's dim*100+heads into
 * *shape, its run data into rec. */
static void compare_finetuned(const char *file, vit_train_opts o, const char *dir,
                              int (*want)(const char *name), vit_run_data *rec, int *shape,
                              char *bad, size_t cap)
{
    char src[600];
    snprintf(src, sizeof src, "%s", fu_path(file));
    vit_model_free(source(src));
    vit_model *m = finetuned(src, o, fu_path(dir), rec), *s = NULL;
    int rc = vit_safetensors_load(src, &s);
    bad[0] = 0;
    if (rc != VIT_OK)
        snprintf(bad, cap, "%s", vit_last_error());
    for (int i = 0; rc == VIT_OK && !bad[0] && i < vit_model_tensor_count(m); i++) {
        const char *name = vit_model_tensor_at(m, i)->name;
        int same = same_tensor(m, s, i), w = want(name);
        if (w > 0 && !same)
            snprintf(bad, cap, "%s must stay the source's but changed", name);
        else if (w < 0 && same)
            snprintf(bad, cap, "%s did not train", name);
    }
    *shape = vit_model_config(m)->dim * 100 + vit_model_config(m)->heads;
    vit_model_free(m);
    vit_model_free(s);
}

/* freeze = 1: the embeddings and block 0 frozen; the rest trains (ln
 * gains may sit still). */
static int frozen_one(const char *name)
{
    int frozen = strncmp(name, "blocks.", 7) != 0
                     ? strncmp(name, "ln.", 3) != 0 && strncmp(name, "head.", 5) != 0
                     : strncmp(name, "blocks.0.", 9) == 0;
    return frozen ? 1 : strcmp(name + strlen(name) - 2, ".g") != 0 ? -1 : 0;
}

START_TEST(train_frozen_blocks)
{
    /* the data's transform recorded beside the weights' file (both keys) */
    vit_train_opts o = {.freeze = 1, .layer_decay = 0.5, .data_fit = {8, 8, 1}};
    vit_run_data rec;
    char bad[300];
    int shape = 0;
    compare_finetuned("src.safetensors", o, "frozen", frozen_one, &rec, &shape, bad, sizeof bad);
    ck_assert_msg(!bad[0], "%s", bad);
    ck_assert_int_eq(rec.fit.height * 100 + rec.fit.width * 10 + rec.fit.channels, 881);
    ck_assert_int_eq(shape, 16 * 100 + 2); /* the source's dim and heads */
    ck_assert_ptr_nonnull(strstr(rec.init_from, "src.safetensors"));
    ck_assert_msg(rec.init_from[0] == '/', "not absolute: %s", rec.init_from);
    ck_assert_uint_eq(rec.init_hash, fnv_file(fu_path("src.safetensors")));
}
END_TEST

/* A linear probe: only the head trains. */
static int probe(const char *name) { return strncmp(name, "head.", 5) != 0; }

START_TEST(train_linear_probe)
{
    vit_train_opts o = {.linear_probe = 1};
    vit_run_data rec;
    char bad[300];
    int shape = 0;
    compare_finetuned("src2.safetensors", o, "probe", probe, &rec, &shape, bad, sizeof bad);
    ck_assert_msg(!bad[0], "%s", bad);
}
END_TEST

/* Nothing is lost on load: a trained checkpoint (with a stem, as
 * Fashion-MNIST's recipe makes) taken up by a fine-tuning run with its
 * head kept holds the source's weights and gives its probabilities,
 * bitwise, in the trainer and in the run's first checkpoint. */
START_TEST(train_init_keeps_source)
{
    vit_dataset train, test;
    digits(&train, &test);
    vit_config cfg;
    vit_train_config tc;
    small_config(&cfg, &tc);
    cfg.stem = 4;
    vit_train_opts so = {.out_dir = fu_path("keep_src"), .ckpt_every = 1};
    vit_train_result res;
    ck_assert_msg(vit_train_run(&cfg, &tc, &train, &test, &so, &res) == VIT_OK, "%s",
                  vit_last_error());
    vit_train_result_free(&res);
    char src[700], ck[700];
    snprintf(src, sizeof src, "%s/last.ckpt", fu_path("keep_src"));
    small_config(&cfg, &tc);
    tc.seed = 9; /* another draw than the source's */
    vit_train_opts o = {.out_dir = fu_path("keep_ft"), .ckpt_every = 1, .init_from = src,
                        .keep_head = 1};
    vit_trainer *t = NULL;
    ck_assert_msg(vit_trainer_new(&t, &cfg, &tc, &train, &test, &o) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(vit_trainer_checkpoint(t), VIT_OK);
    snprintf(ck, sizeof ck, "%s/last.ckpt", fu_path("keep_ft"));
    vit_model *s = NULL, *saved = NULL, *m = vit_trainer_model(t);
    ck_assert_msg(vit_run_load(src, &s, NULL, NULL, NULL) == VIT_OK, "%s", vit_last_error());
    ck_assert_msg(vit_run_load(ck, &saved, NULL, NULL, NULL) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(vit_model_config(m)->stem, 4);
    vit_model *got[2] = {m, saved};
    vit_tape *tape = vit_tape_new();
    size_t n = (size_t)test.count * 10;
    vit_real *ps = malloc(n * sizeof *ps), *pm = malloc(n * sizeof *pm);
    ck_assert(tape && ps && pm);
    ck_assert_int_eq(vit_predict_tta(s, tape, test.images, test.count, VIT_TTA_NONE, ps), VIT_OK);
    double spread = 0; /* a trained source: its probabilities are not all 1/10 */
    for (size_t i = 0; i < n; i++)
        spread += fabs((double)ps[i] - 0.1);
    ck_assert_msg(spread > 1e-3 * (double)n, "the source predicts uniformly");
    for (int g = 0; g < 2; g++) {
        ck_assert_int_eq(vit_model_tensor_count(got[g]), vit_model_tensor_count(s));
        for (int i = 0; i < vit_model_tensor_count(s); i++)
            ck_assert_msg(same_tensor(got[g], s, i), "%s: %s differs from the source",
                          g ? "the checkpoint" : "the trainer", vit_model_tensor_at(s, i)->name);
        ck_assert_int_eq(vit_predict_tta(got[g], tape, test.images, test.count, VIT_TTA_NONE,
                                         pm), VIT_OK);
        ck_assert_msg(memcmp(ps, pm, n * sizeof *ps) == 0, "%s: the probabilities differ",
                      g ? "the checkpoint" : "the trainer");
    }
    free(ps);
    free(pm);
    vit_tape_free(tape);
    vit_model_free(s);
    vit_model_free(saved);
    vit_trainer_free(t);
}
END_TEST

/* Each misuse refused before anything is written. */
START_TEST(train_refusals)
{
    char src[600];
    snprintf(src, sizeof src, "%s", fu_path("src3.safetensors"));
    vit_model_free(source(src));
    vit_dataset train, test;
    digits(&train, &test);
    vit_config cfg;
    vit_train_config tc;
    small_config(&cfg, &tc);
    static const struct {
        int init, resume, freeze, arch;
        double decay;
        const char *want;
    } cases[] = {
        {0, 0, 1, 0, 0, "freeze applies only to a run started from trained weights"},
        {1, 1, 0, 0, 0, "cannot be combined with resume"},
        {1, 0, 3, 0, 0, "freeze 3 is not in 0 .. 2"},
        {1, 0, 0, 0, 1.5, "layer_decay 1.5 is not in (0, 1]"},
        {1, 0, 0, 1, 0, "init_arch and init_heads are for a timm file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vit_train_opts o = {.out_dir = fu_path("refused"), .ckpt_every = 1,
                            .init_from = cases[i].init ? src : NULL,
                            .resume = cases[i].resume ? "x.ckpt" : NULL,
                            .freeze = cases[i].freeze, .layer_decay = cases[i].decay,
                            .init_arch = cases[i].arch ? "vit_tiny_patch16_224" : NULL};
        vit_train_result res;
        ck_assert_int_eq(vit_train_run(&cfg, &tc, &train, &test, &o, &res), VIT_EINVAL);
        ck_assert_msg(strstr(vit_last_error(), cases[i].want), "case %zu: %s", i,
                      vit_last_error());
        ck_assert_int_eq(access(fu_path("refused/last.ckpt"), F_OK), -1);
    }
}
END_TEST

/* A small Swin (8x8 gray images: a 4x4 grid in windows of 2, two stages),
 * with its keys set on sc and the shape h x w. */
static void swin_config(vit_config *sc, int h, int w)
{
    vit_config_default(sc);
    char hs[16], ws[16];
    snprintf(hs, sizeof hs, "%d", h);
    snprintf(ws, sizeof ws, "%d", w);
    const char *const kv[][2] = {
        {"arch", "swin"}, {"image_height", hs}, {"image_width", ws}, {"channels", "1"},
        {"classes", "10"}, {"patch", "2"}, {"window", "2"}, {"embed_dim", "4"},
        {"stages", "2"}, {"depth_1", "2"}, {"depth_2", "2"}, {"heads_1", "2"},
        {"heads_2", "2"}, {"mlp_ratio", "2"}};
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        ck_assert_msg(vit_config_set(sc, kv[i][0], kv[i][1]) == VIT_OK, "%s: %s", kv[i][0],
                      vit_last_error());
}

/* Another architecture's weights adapt as the ViT's do, where it has the
 * same parts: a gray Swin read by an RGB one computes the same logits on
 * equal channels (its patch embedding repeated / 3, everything else
 * copied); a new head for other classes; images its windows cannot tile
 * are refused naming the size; and vit_train_run fine-tunes it, refusing
 * the ViT-only freeze. */
START_TEST(swin_adapts)
{
    vit_config sc;
    swin_config(&sc, 8, 8);
    vit_model *swin = vit_model_new(&sc);
    ck_assert_msg(swin != NULL, "%s", vit_last_error());
    vit_rng rng;
    vit_rng_seed(&rng, 2);
    vit_model_init(swin, &rng);

    vit_config rgb = sc;
    rgb.channels = 3;
    vit_adapt_opts keep = {.keep_head = 1};
    vit_model *m = NULL;
    char note[256];
    ck_assert_msg(vit_model_adapt(swin, &rgb, &keep, &rng, &m, note, sizeof note) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_msg(strstr(note, "1 -> 3 channels (repeated / 3)"), "note: %s", note);
    enum { B = 3, HW = 64 };
    vit_real g[B * HW], g3[B * HW * 3];
    gray_and_rgb(7, g, g3, (size_t)B * HW);
    vit_tape *tape = vit_tape_new();
    vit_tensor *y = vit_model_forward(swin, tape, g, B, 0);
    ck_assert_ptr_nonnull(y);
    double want[B * 10], spread = 0;
    for (int i = 0; i < B * 10; i++)
        want[i] = (double)y->data[i], spread = fmax(spread, fabs(want[i] - want[0]));
    ck_assert(spread > 1e-3); /* logits that tell the classes apart */
    vit_tape_free(tape);
    expect_logits(m, g3, B, want, 1e-5, "swin 1 -> 3 (repeated / 3)");
    vit_model_free(m);

    /* Other classes: a new head, every other tensor copied bitwise. */
    vit_config five = sc;
    five.classes = 5;
    vit_adapt_opts fresh = {.keep_head = 0};
    ck_assert_msg(vit_model_adapt(swin, &five, &fresh, &rng, &m, note, sizeof note) == VIT_OK,
                  "%s", vit_last_error());
    ck_assert_msg(strstr(note, "new head (5 classes)"), "note: %s", note);
    int copied = 0;
    for (int i = 0; i < vit_model_tensor_count(m); i++) {
        const vit_model_tensor *t = vit_model_tensor_at(m, i), *u = vit_model_tensor_at(swin, i);
        ck_assert_str_eq(t->name, u->name);
        if (strncmp(t->name, "head.", 5) == 0)
            continue;
        ck_assert_msg(t->size == u->size &&
                      memcmp(vit_model_params(m) + t->offset, vit_model_params(swin) + u->offset,
                             t->size * sizeof(vit_real)) == 0, "%s not copied", t->name);
        copied++;
    }
    ck_assert_int_eq(copied, vit_model_tensor_count(m) - 2);
    ck_assert_int_eq(vit_model_tensor_at(m, vit_model_tensor_count(m) - 2)->shape[1], 5);
    vit_model_free(m);

    /* 12x12 images: a 6x6 grid that merges to 3x3, which windows of 2 do
     * not tile. */
    vit_config big = sc;
    big.image_height = big.image_width = 12;
    m = (vit_model *)&big;
    ck_assert_int_eq(vit_model_adapt(swin, &big, &fresh, &rng, &m, NULL, 0), VIT_EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(vit_last_error(), "the swin model of the source does not fit 12x12 "
                         "images"), "%s", vit_last_error());

    /* Through the trainer: it fine-tunes from the export, and names the
     * ViT-only options it cannot apply. */
    char path[600];
    snprintf(path, sizeof path, "%s", fu_path("swin.safetensors"));
    ck_assert_msg(vit_safetensors_save(swin, NULL, NULL, path, NULL) == VIT_OK, "%s",
                  vit_last_error());
    vit_model_free(swin);
    vit_dataset train, test;
    digits(&train, &test);
    vit_config cfg;
    vit_train_config tc;
    small_config(&cfg, &tc);
    vit_train_opts o = {.out_dir = fu_path("swin_frozen"), .ckpt_every = 1, .init_from = path,
                        .freeze = 1};
    vit_train_result res;
    ck_assert_int_eq(vit_train_run(&cfg, &tc, &train, &test, &o, &res), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "a swin model: freeze counts a ViT's blocks"), "%s",
                  vit_last_error());
    ck_assert_int_eq(access(fu_path("swin_frozen/last.ckpt"), F_OK), -1);
    o.freeze = 0;
    o.out_dir = fu_path("swin_tuned");
    ck_assert_msg(vit_train_run(&cfg, &tc, &train, &test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    vit_train_result_free(&res);
    vit_model *tuned = NULL;
    ck_assert_msg(vit_run_load(fu_path("swin_tuned/last.ckpt"), &tuned, NULL, NULL, NULL) ==
                  VIT_OK, "%s", vit_last_error());
    ck_assert_str_eq(vit_model_arch(tuned)->name, "swin");
    vit_model_free(tuned);
}
END_TEST

static Suite *finetune_suite(void)
{
    Suite *s = suite_create("finetune");
    TCase *tc = tcase_create("timm");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, config_from_shapes);
    tcase_add_test(tc, logits_224);
    tcase_add_test(tc, logits_112_resampled);
    tcase_add_test(tc, resample_matches_interpolate);
    tcase_add_test(tc, round_trip_bitwise);
    tcase_add_test(tc, channels_adapted);
    tcase_add_test(tc, new_head);
    tcase_add_test(tc, fold_refuses_padding);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, arch_table);
    suite_add_tcase(s, tc);
    TCase *tt = tcase_create("trainer");
    tcase_set_timeout(tt, 120);
    tcase_add_test(tt, train_frozen_blocks);
    tcase_add_test(tt, train_linear_probe);
    tcase_add_test(tt, train_init_keeps_source);
    tcase_add_test(tt, train_refusals);
    tcase_add_test(tt, swin_adapts);
    suite_add_tcase(s, tt);
    return s;
}

int main(void) { return fu_run_suite(finetune_suite, "/tmp/vit-finetune-XXXXXX"); }
