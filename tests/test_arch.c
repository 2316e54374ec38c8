/*
 * The architecture seam (vit/arch.h): the registry and its refusals, an
 * architecture's own keys through the one config parser (given flags, the
 * arch line anywhere in a file, another arch's key named as such), a model
 * of a registered architecture (forward, training gradients checked against
 * central differences, parameter count, multiply-adds), and its checkpoint
 * and safetensors round trips.  The float64 library.
 */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file_util.h"
#include "vit/vit.h"

/* ---- a tiny architecture: flatten, linear (+ GELU), linear ---------------- */

typedef struct tiny_config {
    int width;
    int act;     /* 0 none, 1 gelu */
    double gain; /* the init std of the first layer, times init_std */
} tiny_config;

static const char *const act_names[] = {"none", "gelu", NULL};
static const vit_arch_key tiny_keys[] = {
    {"width", VIT_KEY_INT, offsetof(tiny_config, width), 1, 1000, "6", "hidden width", NULL,
     NULL},
    {"act", VIT_KEY_ENUM, offsetof(tiny_config, act), 0, 0, "gelu", "activation", act_names,
     NULL},
    {"gain", VIT_KEY_REAL, offsetof(tiny_config, gain), 0.125, 8, "2", "init gain", NULL,
     NULL},
};

static int tiny_build(const vit_config *cfg, vit_params *p, void **state)
{
    const tiny_config *a = vit_config_arch_data(cfg);
    int in = cfg->image_height * cfg->image_width * cfg->channels;
    *state = NULL;
    int s0[2] = {in, a->width}, s1[1] = {a->width}, s2[2] = {a->width, cfg->classes},
        s3[1] = {cfg->classes};
    if (vit_params_add(p, "l1.w", 2, s0, VIT_INIT_NORMAL, a->gain * cfg->init_std, 1) < 0
        || vit_params_add(p, "l1.b", 1, s1, VIT_INIT_NORMAL, cfg->init_std, 0) < 0
        || vit_params_add(p, "l2.w", 2, s2, VIT_INIT_NORMAL, cfg->init_std, 1) < 0
        || vit_params_add(p, "l2.b", 1, s3, VIT_INIT_ZERO, 0, 0) < 0)
        return VIT_EINVAL;
    return VIT_OK;
}

static vit_tensor *tiny_forward(const vit_arch_run *r)
{
    const tiny_config *a = vit_config_arch_data(r->cfg);
    const vit_config *c = r->cfg;
    int flat[2] = {r->batch, c->image_height * c->image_width * c->channels};
    vit_tensor *x = vit_op_reshape(r->tape, r->images, 2, flat);
    x = vit_op_linear(r->tape, x, vit_arch_param(r, 0), vit_arch_param(r, 1));
    if (a->act == 1)
        x = vit_op_gelu(r->tape, x);
    return vit_op_linear(r->tape, x, vit_arch_param(r, 2), vit_arch_param(r, 3));
}

static void tiny_describe(const vit_config *cfg, vit_arch_info *info)
{
    const tiny_config *a = vit_config_arch_data(cfg);
    info->macs = (size_t)cfg->image_height * cfg->image_width * cfg->channels * a->width
               + (size_t)a->width * cfg->classes;
}

static int tiny_export(const vit_config *cfg, int i, const vit_param_tensor *t,
                       vit_arch_export *e)
{
    (void)cfg;
    snprintf(e->name, sizeof e->name, "net.%d.%s", i / 2 * 2, i % 2 ? "bias" : "weight");
    if (t->ndim == 2)
        e->op = VIT_EXPORT_TRANSPOSE;
    e->order = -i; /* the file in reverse layout order */
    return VIT_OK;
}

static const vit_arch tiny = {
    .name = "tiny", .summary = "a two-layer perceptron", .keys = tiny_keys, .nkeys = 3,
    .config_size = sizeof(tiny_config), .build = tiny_build, .forward = tiny_forward,
    .describe = tiny_describe, .export_tensor = tiny_export};

/* Registered once for the whole suite (the registry has no removal). */
static void setup(void)
{
    if (!vit_arch_find("tiny"))
        ck_assert_msg(vit_arch_register(&tiny) == VIT_OK, "%s", vit_last_error());
}

static void tiny_cfg(vit_config *c)
{
    vit_config_default(c);
    ck_assert_msg(vit_config_set(c, "arch", "tiny") == VIT_OK, "%s", vit_last_error());
    c->image_height = c->image_width = 4;
    c->channels = 1;
    c->classes = 3;
}

/* ---- the registry ----------------------------------------------------------- */

START_TEST(test_registry)
{
    ck_assert_ptr_eq(vit_arch_at(0), vit_arch_vit());
    ck_assert_str_eq(vit_arch_vit()->name, "vit");
    ck_assert_ptr_eq(vit_arch_find("vit"), vit_arch_vit());
    ck_assert_ptr_eq(vit_arch_find("tiny"), &tiny);
    ck_assert_ptr_null(vit_arch_find("nope"));
    ck_assert_ptr_null(vit_arch_find(NULL));
    ck_assert_ptr_null(vit_arch_at(vit_arch_count()));
    ck_assert_ptr_eq(vit_arch_at(vit_arch_count() - 1), &tiny);
    /* Refusals, each naming the problem; nothing is added. */
    int n = vit_arch_count();
    ck_assert_int_eq(vit_arch_register(&tiny), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "taken"));
    vit_arch bad = tiny;
    bad.name = "Tiny2";
    ck_assert_int_eq(vit_arch_register(&bad), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "Tiny2"));
    bad.name = "tiny2";
    bad.forward = NULL;
    ck_assert_int_eq(vit_arch_register(&bad), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "forward"));
    bad = tiny;
    bad.name = "tiny3";
    vit_arch_key clash[1] = {tiny_keys[0]};
    clash[0].key = "lr"; /* a shared key */
    bad.keys = clash;
    bad.nkeys = 1;
    ck_assert_int_eq(vit_arch_register(&bad), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "'lr'"));
    clash[0] = tiny_keys[0];
    clash[0].def = "0"; /* below its range */
    ck_assert_int_eq(vit_arch_register(&bad), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "width: 0 is out of range"));
    clash[0] = tiny_keys[0];
    clash[0].offset = sizeof(tiny_config); /* past its struct */
    ck_assert_int_eq(vit_arch_register(&bad), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "offset"));
    /* follows: an earlier INT key of the same range, nothing else */
    vit_arch_key two[2] = {tiny_keys[0], tiny_keys[0]};
    two[1].key = "width2";
    two[1].offset = offsetof(tiny_config, act);
    bad.keys = two;
    bad.nkeys = 2;
    two[1].follows = "depth"; /* no such key */
    ck_assert_int_eq(vit_arch_register(&bad), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "key 'width2' follows 'depth'"));
    two[1].follows = "width2"; /* itself: not earlier */
    ck_assert_int_eq(vit_arch_register(&bad), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "follows 'width2'"));
    two[1].follows = "width";
    two[1].hi = 999; /* another range */
    ck_assert_int_eq(vit_arch_register(&bad), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "not an earlier INT key of its range"));
    two[0] = tiny_keys[2]; /* a REAL key */
    two[0].key = "width", two[1].hi = two[0].hi, two[1].lo = two[0].lo;
    ck_assert_int_eq(vit_arch_register(&bad), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "not an earlier INT key"));
    ck_assert_int_eq(vit_arch_register(NULL), VIT_EINVAL);
    ck_assert_int_eq(vit_arch_count(), n);
    /* Selecting an architecture that is not registered: its text would not
     * read back. */
    vit_config c;
    vit_config_default(&c);
    ck_assert_int_eq(vit_config_set_arch(&c, &bad), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "'tiny3' is not registered"));
    ck_assert_ptr_null(c.arch);
}
END_TEST

/* ---- keys ----------------------------------------------------------------------- */

START_TEST(test_keys_and_given)
{
    vit_config c;
    vit_config_default(&c);
    ck_assert_ptr_eq(vit_config_arch(&c), vit_arch_vit());
    ck_assert_int_eq(vit_config_given(&c, "arch"), 0);
    ck_assert_int_eq(vit_config_given(&c, "patch"), 0);
    ck_assert_int_eq(vit_config_given(&c, "init_std"), 0);
    ck_assert_int_eq(vit_config_given(&c, "lr"), VIT_EINVAL); /* the recipe's */
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "vit_train_config_given"));
    ck_assert_int_eq(vit_config_set(&c, "patch", "2"), VIT_OK);
    ck_assert_int_eq(vit_config_given(&c, "patch"), 1);
    ck_assert_int_eq(vit_config_given(&c, "dim"), 0);
    /* Another architecture's key, before selecting it: named as such. */
    ck_assert_int_eq(vit_config_set(&c, "width", "5"), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(),
                     "width: a key of architecture tiny, not of vit (set arch = tiny first)");
    ck_assert_int_lt(vit_config_given(&c, "width"), 0);
    ck_assert_int_eq(vit_config_set(&c, "arch", "swan"), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "arch: unknown architecture 'swan' (known: vit"));
    /* Selecting it: its defaults, none given; the shared keys keep theirs. */
    ck_assert_int_eq(vit_config_set(&c, "init_std", "0.01"), VIT_OK);
    ck_assert_int_eq(vit_config_set(&c, "arch", "tiny"), VIT_OK);
    ck_assert_int_eq(vit_config_given(&c, "arch"), 1);
    const tiny_config *a = vit_config_arch_data(&c);
    ck_assert_int_eq(a->width, 6);
    ck_assert_int_eq(a->act, 1);
    ck_assert(a->gain == 2);
    ck_assert_int_eq(vit_config_given(&c, "width"), 0);
    ck_assert_int_eq(vit_config_given(&c, "init_std"), 1);
    ck_assert(c.init_std == 0.01);
    ck_assert_int_lt(vit_config_given(&c, "lr"), 0); /* the recipe's, not the network's */
    ck_assert_int_eq(vit_config_set(&c, "width", "9"), VIT_OK);
    ck_assert_int_eq(vit_config_given(&c, "width"), 1);
    ck_assert_int_eq(a->width, 9);
    /* The same arch again keeps its keys; the ViT's are no keys of it. */
    ck_assert_int_eq(vit_config_set(&c, "arch", "tiny"), VIT_OK);
    ck_assert_int_eq(a->width, 9);
    ck_assert_int_eq(vit_config_set(&c, "dim", "8"), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "dim: a key of architecture vit, not of tiny"));
    /* Each type's refusal is "KEY: PROBLEM" and changes nothing. */
    vit_config before = c;
    ck_assert_int_eq(vit_config_set(&c, "act", "relu"), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(), "act: expected none or gelu, got 'relu'");
    ck_assert_int_eq(vit_config_set(&c, "gain", "9"), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(), "gain: 9 is out of range [0.125, 8]");
    ck_assert_int_eq(vit_config_set(&c, "width", "x"), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(), "width: expected an integer, got 'x'");
    ck_assert(memcmp(&c, &before, sizeof c) == 0);
    /* Back to the ViT: its defaults. */
    ck_assert_int_eq(vit_config_set(&c, "arch", "vit"), VIT_OK);
    ck_assert_ptr_null(c.arch);
    ck_assert_int_eq(c.patch, 4);
    ck_assert_int_eq(vit_config_given(&c, "patch"), 0);
}
END_TEST

START_TEST(test_text_round_trip)
{
    char buf[8192], buf2[8192];
    vit_config c, d;
    vit_config_default(&c);
    ck_assert_int_gt(vit_config_format(&c, NULL, buf, sizeof buf), 0);
    ck_assert_ptr_null(strstr(buf, "arch")); /* the ViT's text is as it always was */
    tiny_cfg(&c);
    ck_assert_int_eq(vit_config_set(&c, "act", "none"), VIT_OK);
    ck_assert_int_eq(vit_config_set(&c, "gain", "0.5"), VIT_OK);
    vit_train_config tc;
    vit_train_config_default(&tc);
    int len = vit_config_format(&c, &tc, buf, sizeof buf);
    ck_assert_int_gt(len, 0);
    ck_assert_ptr_nonnull(strstr(buf, "classes = 3\narch = tiny\nwidth = 6\nact = none\n"
                                      "gain = 0.5\nepochs = "));
    ck_assert_ptr_null(strstr(buf, "dim = ")); /* no ViT keys */
    vit_config_default(&d);
    vit_train_config dtc;
    vit_train_config_default(&dtc);
    ck_assert_msg(vit_config_parse(&d, &dtc, buf, "t") == VIT_OK, "%s", vit_last_error());
    ck_assert_ptr_eq(d.arch, &tiny);
    ck_assert_int_eq(vit_config_format(&d, &dtc, buf2, sizeof buf2), len);
    ck_assert_str_eq(buf, buf2);
    /* arch anywhere in the text; a key twice is refused. */
    vit_config_default(&d);
    ck_assert_msg(vit_config_parse(&d, NULL, "width = 3\n# x\narch = tiny\n", "t") == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(((const tiny_config *)vit_config_arch_data(&d))->width, 3);
    vit_config_default(&d);
    ck_assert_int_eq(vit_config_parse(&d, NULL, "arch = tiny\nwidth = 3\nwidth = 4\n", "t"), VIT_EFORMAT);
    ck_assert_str_eq(vit_last_error(), "t:3: width is set twice (first on line 2)");
    vit_config_default(&d);
    ck_assert_int_eq(vit_config_parse(&d, NULL, "arch = tiny\narch = tiny\n", "t"), VIT_EFORMAT);
    ck_assert_str_eq(vit_last_error(), "t:2: arch is set twice (first on line 1)");
}
END_TEST

/* ---- a model of it ---------------------------------------------------------- */

START_TEST(test_model_counts_and_forward)
{
    vit_config c;
    tiny_cfg(&c);
    ck_assert_uint_eq(vit_config_param_count(&c), 16 * 6 + 6 + 6 * 3 + 3);
    ck_assert_uint_eq(vit_config_macs(&c), 16 * 6 + 6 * 3);
    vit_model *m = vit_model_new(&c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    ck_assert_ptr_eq(vit_model_arch(m), &tiny);
    ck_assert_uint_eq(vit_model_param_count(m), vit_config_param_count(&c));
    ck_assert_int_eq(vit_model_tensor_count(m), 4);
    ck_assert_str_eq(vit_model_tensor_at(m, 2)->name, "l2.w");
    ck_assert_int_eq(vit_model_info(m)->attn_layers, 0);
    vit_rng rng;
    vit_rng_seed(&rng, 5);
    vit_model_init(m, &rng);
    vit_real img[2 * 16];
    for (int i = 0; i < 32; i++)
        img[i] = (vit_real)vit_rng_uniform(&rng);
    vit_tape *tape = vit_tape_new();
    vit_tensor *z = vit_model_forward(m, tape, img, 2, 0);
    ck_assert_ptr_nonnull(z);
    ck_assert_int_eq(z->ndim, 2);
    ck_assert_int_eq(z->shape[0], 2);
    ck_assert_int_eq(z->shape[1], 3);
    /* By hand: the first image's logits. */
    const vit_real *p = vit_model_params(m);
    for (int k = 0; k < 3; k++) {
        double s = p[96 + 6 + 18 + k];
        for (int j = 0; j < 6; j++) {
            double h = p[96 + j];
            for (int i = 0; i < 16; i++)
                h += img[i] * p[i * 6 + j];
            h = 0.5 * h * (1 + erf(h / sqrt(2.0)));
            s += h * p[96 + 6 + j * 3 + k];
        }
        ck_assert_msg(fabs(s - z->data[k]) < 1e-12, "logit %d: %g by hand, %g", k, s,
                      (double)z->data[k]);
    }
    ck_assert_ptr_null(vit_model_attention_maps(m, 0));
    vit_tape_free(tape);
    vit_model_free(m);
}
END_TEST

/* The training step's gradient against central differences of its loss. */
START_TEST(test_train_grads_match_differences)
{
    vit_config c;
    tiny_cfg(&c);
    vit_model *m = vit_model_new(&c);
    ck_assert_ptr_nonnull(m);
    vit_rng rng;
    vit_rng_seed(&rng, 9);
    vit_model_init(m, &rng);
    vit_real img[3 * 16];
    int labels[3] = {0, 2, 1};
    for (int i = 0; i < 48; i++)
        img[i] = (vit_real)vit_rng_uniform(&rng);
    double loss, lp, lm;
    ck_assert_int_eq(vit_model_train_grads(m, img, labels, 3, 0.1, &loss, NULL), VIT_OK);
    size_t n = vit_model_param_count(m);
    vit_real *g = malloc(n * sizeof *g);
    memcpy(g, vit_model_grads(m), n * sizeof *g);
    vit_real *p = vit_model_params(m);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        vit_real keep = p[i], h = 1e-5;
        p[i] = keep + h;
        ck_assert_int_eq(vit_model_train_grads(m, img, labels, 3, 0.1, &lp, NULL), VIT_OK);
        p[i] = keep - h;
        ck_assert_int_eq(vit_model_train_grads(m, img, labels, 3, 0.1, &lm, NULL), VIT_OK);
        p[i] = keep;
        double fd = (lp - lm) / (2 * h), err = fabs(fd - g[i]) / fmax(1e-6, fabs(fd) + fabs(g[i]));
        worst = fmax(worst, err);
    }
    ck_assert_msg(worst < 1e-6, "worst relative error %g", worst);
    free(g);
    vit_model_free(m);
}
END_TEST

/* ---- files ------------------------------------------------------------------ */

/* back holds m's parameters as float32 keeps them (the files' type; this
 * suite is the float64 library). */
static void assert_same_as_float(vit_model *m, vit_model *back)
{
    ck_assert_uint_eq(vit_model_param_count(back), vit_model_param_count(m));
    const vit_real *a = vit_model_params(m), *b = vit_model_params(back);
    for (size_t i = 0; i < vit_model_param_count(m); i++)
        ck_assert_msg(b[i] == (vit_real)(float)a[i], "value %zu: %.17g read back as %.17g", i,
                      (double)a[i], (double)b[i]);
}

static vit_model *trained_tiny(void)
{
    vit_config c;
    tiny_cfg(&c);
    ck_assert_int_eq(vit_config_set(&c, "width", "5"), VIT_OK);
    vit_model *m = vit_model_new(&c);
    ck_assert_ptr_nonnull(m);
    vit_rng rng;
    vit_rng_seed(&rng, 3);
    vit_model_init(m, &rng);
    return m;
}

/* bf16 needs the architecture's bf16_weights hook (vit/arch.h): for a
 * registered one without it, bf16 is refused, naming the architecture,
 * whatever the CPU (this float64 library has no bf16 at all, yet the
 * answer is the same), the model keeping fp32; auto is fp32 for it, and
 * fp32 is fp32.  (tests/test_mixed.c trains one with the hook.) */
START_TEST(test_registered_arch_refuses_bf16)
{
    vit_config c;
    tiny_cfg(&c);
    vit_model *m = vit_model_new(&c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    ck_assert_int_eq(vit_model_set_precision(m, VIT_PRECISION_BF16), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "bf16") && strstr(vit_last_error(), "not tiny"),
                  "%s", vit_last_error());
    ck_assert_int_eq(vit_model_precision(m), VIT_PRECISION_FP32);
    ck_assert_int_eq(vit_model_set_precision(m, VIT_PRECISION_AUTO), VIT_PRECISION_FP32);
    ck_assert_int_eq(vit_model_set_precision(m, VIT_PRECISION_FP32), VIT_PRECISION_FP32);
    ck_assert_int_eq(vit_model_precision(m), VIT_PRECISION_FP32);
    vit_model_free(m);
}
END_TEST

START_TEST(test_checkpoint_round_trip)
{
    vit_model *m = trained_tiny(), *back = NULL;
    vit_run_state st;
    memset(&st, 0, sizeof st);
    vit_rng_seed(&st.rng, 1);
    const char *path = fu_path("tiny.ckpt");
    ck_assert_msg(vit_run_save(path, m, NULL, NULL, &st) == VIT_OK, "%s", vit_last_error());
    vit_run_state got;
    ck_assert_msg(vit_run_load(path, &back, NULL, NULL, &got) == VIT_OK, "%s", vit_last_error());
    ck_assert_ptr_eq(vit_model_arch(back), &tiny);
    ck_assert_int_eq(((const tiny_config *)vit_config_arch_data(vit_model_config(back)))->width, 5);
    ck_assert_uint_eq(vit_model_param_count(back), vit_model_param_count(m));
    assert_same_as_float(m, back);
    vit_run_state_free(&got);
    vit_model_free(back);
    vit_model_free(m);
}
END_TEST

START_TEST(test_safetensors_round_trip)
{
    vit_model *m = trained_tiny(), *back = NULL;
    const char *path = fu_path("tiny.safetensors");
    ck_assert_msg(vit_safetensors_save(m, NULL, NULL, path, NULL) == VIT_OK, "%s", vit_last_error());
    size_t n;
    unsigned char *b = fu_read(path, &n);
    b[n] = 0;
    /* Its names, its order (reversed), its layout ([out, in] for a matrix). */
    const char *w2 = strstr((char *)b + 8, "\"net.2.weight\":{\"dtype\":\"F32\",\"shape\":[3,5]");
    const char *w0 = strstr((char *)b + 8, "\"net.0.weight\":{\"dtype\":\"F32\",\"shape\":[5,16]");
    ck_assert_ptr_nonnull(w2);
    ck_assert_ptr_nonnull(w0);
    ck_assert(w2 < w0);
    ck_assert_ptr_nonnull(strstr((char *)b + 8, "\"arch\":\"tiny\""));
    free(b);
    ck_assert_msg(vit_safetensors_load(path, &back) == VIT_OK, "%s", vit_last_error());
    ck_assert_ptr_eq(vit_model_arch(back), &tiny);
    assert_same_as_float(m, back);
    vit_model_free(back);
    vit_model_free(m);
}
END_TEST

/* A resume keeps its model: a ViT's checkpoint under a tiny config is
 * refused, naming both architectures (not a line of keys that moved). */
START_TEST(test_resume_keeps_the_arch)
{
    vit_dataset train, test;
    ck_assert_msg(vit_data_load_digits("../data/digits.csv.gz", 1437, &train, &test) == VIT_OK,
                  "%s", vit_last_error());
    vit_config v;
    vit_config_default(&v);
    vit_model *m = vit_model_new(&v);
    ck_assert_ptr_nonnull(m);
    vit_run_state st;
    memset(&st, 0, sizeof st);
    vit_adamw opt;
    memset(&opt, 0, sizeof opt);
    ck_assert_int_eq(vit_adamw_init(&opt, vit_model_param_count(m), 0.9, 0.999, 1e-8, 0.05),
                     VIT_OK);
    const char *path = fu_path("vit.ckpt");
    vit_train_config tc;
    vit_train_config_default(&tc);
    ck_assert_msg(vit_run_save(path, m, &tc, &opt, &st) == VIT_OK, "%s", vit_last_error());
    vit_adamw_free(&opt);
    vit_model_free(m);
    vit_config c;
    vit_config_default(&c);
    ck_assert_int_eq(vit_config_set(&c, "arch", "tiny"), VIT_OK);
    vit_train_opts o = {.out_dir = fu_path("resumed"), .resume = path, .ckpt_every = 1};
    vit_trainer *t = NULL;
    int rc = vit_trainer_new(&t, &c, &tc, &train, &test, &o);
    ck_assert_msg(rc == VIT_EINVAL, "%d: %s", rc, vit_last_error());
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(vit_last_error(), "has arch = vit, this run asks for tiny") != NULL, "%s",
                  vit_last_error());
    vit_dataset_free(&train);
    vit_dataset_free(&test);
}
END_TEST

/* ---- attention layers' shapes (vit_arch.attn_layer) ------------------------ */

/* tiny, saying it has two layers of maps: a 4x4 grid, then a 2x2 one. */
static void maps_describe(const vit_config *cfg, vit_arch_info *info)
{
    tiny_describe(cfg, info);
    info->attn_layers = 2;
}

static void maps_layer(const vit_config *cfg, int layer, vit_arch_attn *a)
{
    (void)cfg;
    a->heads = 1 + layer;
    a->grid_h = a->grid_w = 4 >> layer;
    a->queries = a->keys = a->grid_h * a->grid_w;
    a->stage = layer;
    snprintf(a->label, sizeof a->label, "stage %d", layer);
}

/* As maps_layer, but layer 1's keys do not cover its grid. */
static void short_layer(const vit_config *cfg, int layer, vit_arch_attn *a)
{
    maps_layer(cfg, layer, a);
    if (layer == 1)
        a->keys = 3;
}

static const vit_arch maps_arch = {
    .name = "tiny_maps", .summary = "tiny with two layers of maps", .keys = tiny_keys,
    .nkeys = 3, .config_size = sizeof(tiny_config), .build = tiny_build,
    .forward = tiny_forward, .describe = maps_describe, .attn_layer = maps_layer};
static const vit_arch no_hook_arch = {
    .name = "tiny_no_hook", .summary = "maps but no attn_layer", .keys = tiny_keys,
    .nkeys = 3, .config_size = sizeof(tiny_config), .build = tiny_build,
    .forward = tiny_forward, .describe = maps_describe};
static const vit_arch short_arch = {
    .name = "tiny_short_keys", .summary = "maps whose keys miss the grid", .keys = tiny_keys,
    .nkeys = 3, .config_size = sizeof(tiny_config), .build = tiny_build,
    .forward = tiny_forward, .describe = maps_describe, .attn_layer = short_layer};

static vit_model *model_of(const vit_arch *a)
{
    if (!vit_arch_find(a->name))
        ck_assert_msg(vit_arch_register(a) == VIT_OK, "%s", vit_last_error());
    vit_config c;
    tiny_cfg(&c);
    ck_assert_int_eq(vit_config_set_arch(&c, a), VIT_OK);
    return vit_model_new(&c);
}

START_TEST(test_attention_layers)
{
    /* The ViT: every block alike, the class token first. */
    vit_config c;
    vit_config_default(&c);
    vit_model *m = vit_model_new(&c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    ck_assert_int_eq(vit_model_info(m)->attn_layers, c.depth);
    for (int l = 0; l < c.depth; l++) {
        const vit_arch_attn *a = vit_model_attention_layer(m, l);
        ck_assert_ptr_nonnull(a);
        ck_assert_int_eq(a->heads, c.heads);
        /* the default's overlapping patches: a 4x4 grid of 8x8 images */
        ck_assert_int_eq(a->grid_h, 4);
        ck_assert_int_eq(a->grid_w, 4);
        ck_assert_int_eq(a->queries, 17);
        ck_assert_int_eq(a->keys, 17);
        ck_assert_int_eq(a->first, 1);
        ck_assert_int_eq(a->cls, 1);
        ck_assert_int_eq(a->stage, 0);
        ck_assert_str_eq(a->label, "");
    }
    ck_assert_ptr_null(vit_model_attention_layer(m, c.depth));
    ck_assert_ptr_null(vit_model_attention_layer(m, -1));
    ck_assert_ptr_null(vit_model_attention_layer(NULL, 0));
    vit_model_free(m);

    /* Layers of their own shapes, kept as the hook gave them. */
    m = model_of(&maps_arch);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    const vit_arch_attn *a0 = vit_model_attention_layer(m, 0), *a1 = vit_model_attention_layer(m, 1);
    ck_assert_int_eq(a0->grid_h, 4);
    ck_assert_int_eq(a0->keys, 16);
    ck_assert_int_eq(a1->grid_w, 2);
    ck_assert_int_eq(a1->heads, 2);
    ck_assert_int_eq(a1->stage, 1);
    ck_assert_str_eq(a1->label, "stage 1");
    vit_model_free(m);

    /* Refused: maps without the hook, and keys that miss the grid. */
    ck_assert_ptr_null(model_of(&no_hook_arch));
    ck_assert_msg(strstr(vit_last_error(), "tiny_no_hook describes 2 attention layers but has "
                                           "no attn_layer hook"), "%s", vit_last_error());
    ck_assert_ptr_null(model_of(&short_arch));
    ck_assert_msg(strstr(vit_last_error(), "tiny_short_keys's attention layer 1: bad keys"),
                  "%s", vit_last_error());
}
END_TEST

static Suite *arch_suite(void)
{
    Suite *s = suite_create("arch");
    TCase *t = tcase_create("seam");
    tcase_add_checked_fixture(t, setup, NULL);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_registry);
    tcase_add_test(t, test_keys_and_given);
    tcase_add_test(t, test_text_round_trip);
    tcase_add_test(t, test_model_counts_and_forward);
    tcase_add_test(t, test_train_grads_match_differences);
    tcase_add_test(t, test_registered_arch_refuses_bf16);
    tcase_add_test(t, test_checkpoint_round_trip);
    tcase_add_test(t, test_safetensors_round_trip);
    tcase_add_test(t, test_resume_keeps_the_arch);
    tcase_add_test(t, test_attention_layers);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return fu_run_suite(arch_suite, "/tmp/vit_arch_XXXXXX"); }
