/*
 * Normalisation by the training set's statistics (vit_config.data_norm):
 * vit_channel_stats and vit_data_norm against their closed forms on tiny
 * made-up images; the model's forward against the plain model fed
 * normalised images; the config text (written only when on, read back
 * bitwise), its refusals; the checkpoint and the export carrying the
 * figures; the trainer computing them from the training part alone, a
 * resumed run and a fine-tuned one keeping the file's; files from before
 * it loading without it.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_util.h"
#include "vit/vit.h"

/* Two images of two pixels of two channels: channel 0 holds 0, 1, 0.5,
 * 0.5 (mean 0.5, variance 0.125), channel 1 is flat at 0.25 (variance 0:
 * the floor alone).  Every value is exact in float and double. */
START_TEST(stats_closed_form)
{
    const vit_real x[8] = {0, 0.25f, 1, 0.25f, 0.5f, 0.25f, 0.5f, 0.25f};
    double mean[2] = {-1, -1}, std[2] = {-1, -1};
    ck_assert_int_eq(vit_channel_stats(x, 2, 2, 2, mean, std), VIT_OK);
    ck_assert(mean[0] == 0.5 && mean[1] == 0.25);
    ck_assert_msg(std[0] == sqrt(0.125 + VIT_IMAGE_NORM_EPS), "std[0] %.17g", std[0]);
    ck_assert_msg(std[1] == sqrt(VIT_IMAGE_NORM_EPS), "std[1] %.17g", std[1]);
    /* applied: channel 0 to (x - 0.5) / std, the flat channel to 0 */
    vit_real y[8];
    ck_assert_int_eq(vit_data_norm(y, x, 2, 2, 2, mean, std), VIT_OK);
    const double s0 = sqrt(0.125 + VIT_IMAGE_NORM_EPS);
    const double want[8] = {-0.5 / s0, 0, 0.5 / s0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 8; i++)
        ck_assert_msg(y[i] == (vit_real)want[i], "y[%d] %.9g, want %.9g", i, y[i], want[i]);
    /* in place */
    vit_real z[8];
    memcpy(z, x, sizeof z);
    ck_assert_int_eq(vit_data_norm(z, z, 2, 2, 2, mean, std), VIT_OK);
    ck_assert_mem_eq(z, y, sizeof z);
    /* one image alone: its own figures (0 and 1: mean 0.5, variance 0.25) */
    ck_assert_int_eq(vit_channel_stats(x, 1, 2, 2, mean, std), VIT_OK);
    ck_assert(mean[0] == 0.5 && std[0] == sqrt(0.25 + VIT_IMAGE_NORM_EPS));
    /* refusals, each naming the argument */
    ck_assert_int_eq(vit_channel_stats(NULL, 1, 2, 2, mean, std), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "images is NULL"));
    ck_assert_int_eq(vit_channel_stats(x, 0, 2, 2, mean, std), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "0 images"));
    ck_assert_int_eq(vit_channel_stats(x, 1, 1, 5, mean, std), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "channels at most 4"));
    vit_real bad[2] = {0, NAN};
    ck_assert_int_eq(vit_channel_stats(bad, 1, 2, 1, mean, std), VIT_ENUM);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "non-finite"));
    ck_assert_int_eq(vit_data_norm(y, x, 2, 2, 2, NULL, std), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "mean is NULL"));
    ck_assert_int_eq(vit_data_norm(y, x, 2, 0, 2, mean, std), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "at least 1"));
}
END_TEST

static const double MEAN[3] = {0.25, 0.5, 0.625}, STD[3] = {0.5, 0.25, 0.125};

/* A small colour ViT (8x8x3, a stem: the zero pad is the normalised zero)
 * with data_norm on (MEAN, STD) or off, the same weights either way. */
static vit_model *small_model(int on)
{
    vit_config c;
    vit_config_default(&c);
    c.channels = 3;
    c.classes = 4;
    c.stem = 4;
    if (on) {
        c.data_norm = 1;
        c.data_mean.n = c.data_std.n = 3;
        memcpy(c.data_mean.v, MEAN, sizeof MEAN);
        memcpy(c.data_std.v, STD, sizeof STD);
    }
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

enum { S = 8, K = 4, B = 3, I = S * S * 3 };

static void inputs(vit_real *x)
{
    for (int j = 0; j < B * I; j++)
        x[j] = (vit_real)fmod(0.37 * j * j + 0.11 * j, 1.0);
}

/* The model reads x as the plain one reads (x - mean) / std, written out
 * here per pixel; and its config text says so only when on. */
START_TEST(model_reads_normalised)
{
    vit_real x[B * I], xn[B * I], with[B * K], without[B * K], plain[B * K];
    inputs(x);
    for (int j = 0; j < B * I; j++)
        xn[j] = (vit_real)(((double)x[j] - MEAN[j % 3]) / STD[j % 3]);
    vit_model *m = small_model(1), *p = small_model(0);
    ck_assert_uint_eq(vit_model_param_count(m), vit_model_param_count(p)); /* no tensor of its own */
    logits(m, x, B, with);
    logits(p, xn, B, without);
    ck_assert_mem_eq(with, without, sizeof with);
    logits(p, x, B, plain); /* and it is not the identity */
    int differ = 0;
    for (int j = 0; j < B * K; j++)
        differ += with[j] != plain[j];
    ck_assert_int_gt(differ, 0);
    /* the training forward (with gradients) reads the same */
    vit_tape *t = vit_tape_new();
    vit_tensor *z = vit_model_forward(m, t, x, B, 1);
    ck_assert_msg(z != NULL, "%s", vit_last_error());
    for (int j = 0; j < B * K; j++)
        ck_assert_msg(fabs((double)z->data[j] - with[j]) < 1e-5, "logit %d: %.9g vs %.9g", j,
                      z->data[j], with[j]);
    vit_tape_free(t);
    /* the text: three lines at the end when on, none when off */
    char text[4096];
    ck_assert_int_gt(vit_config_format(vit_model_config(p), NULL, text, sizeof text), 0);
    ck_assert_ptr_null(strstr(text, "data_"));
    ck_assert_int_gt(vit_config_format(vit_model_config(m), NULL, text, sizeof text), 0);
    const char *tail = "\ndata_norm = 1\ndata_mean = 0.25,0.5,0.625\ndata_std = 0.5,0.25,0.125\n";
    ck_assert_msg(strlen(text) > strlen(tail)
                  && strcmp(text + strlen(text) - strlen(tail), tail) == 0, "%s", text);
    vit_config back;
    vit_config_default(&back);
    ck_assert_int_eq(vit_config_parse(&back, NULL, text, "text"), VIT_OK);
    ck_assert_int_eq(back.data_norm, 1);
    ck_assert_int_eq(back.data_mean.n, 3);
    ck_assert_mem_eq(back.data_mean.v, MEAN, sizeof MEAN);
    ck_assert_mem_eq(back.data_std.v, STD, sizeof STD);
    ck_assert_int_eq(vit_config_check(&back), VIT_OK);
    vit_model_free(m);
    vit_model_free(p);
}
END_TEST

/* Values that survive text bitwise, not only short ones. */
START_TEST(text_bitwise)
{
    vit_config c;
    vit_config_default(&c);
    c.channels = 3;
    c.data_norm = 1;
    c.data_mean.n = c.data_std.n = 3;
    for (int i = 0; i < 3; i++) {
        c.data_mean.v[i] = 1.0 / (3 + i);
        c.data_std.v[i] = sqrt(0.07 * (i + 1));
    }
    char text[4096];
    ck_assert_int_gt(vit_config_format(&c, NULL, text, sizeof text), 0);
    vit_config back;
    vit_config_default(&back);
    ck_assert_int_eq(vit_config_parse(&back, NULL, text, "text"), VIT_OK);
    ck_assert_mem_eq(back.data_mean.v, c.data_mean.v, 3 * sizeof(double));
    ck_assert_mem_eq(back.data_std.v, c.data_std.v, 3 * sizeof(double));
}
END_TEST

/* Each bad value or combination: one error naming the key. */
START_TEST(refusals)
{
    static const struct {
        const char *key, *value, *want;
    } bad[] = {
        {"data_norm", "2", "data_norm: 2 is out of range"},
        {"data_mean", "0.5,x,0.5", "data_mean: expected comma-separated numbers"},
        {"data_mean", "0.5,,0.5", "data_mean: expected comma-separated numbers"},
        {"data_mean", "", "data_mean: expected comma-separated numbers"},
        {"data_mean", "nan", "data_mean: expected comma-separated numbers"},
        {"data_mean", "1,2,3,4,5", "data_mean: more than 4 values"},
        {"data_std", "0.5,0,0.5", "data_std: 0 (value 2 of '0.5,0,0.5') is out of range"},
        {"data_std", "-1", "data_std: -1 (value 1 of '-1') is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vit_config c;
        vit_config_default(&c);
        ck_assert_int_eq(vit_config_set(&c, bad[i].key, bad[i].value), VIT_EINVAL);
        ck_assert_msg(strstr(vit_last_error(), bad[i].want), "%s = '%s': %s", bad[i].key,
                      bad[i].value, vit_last_error());
        ck_assert_int_eq(c.data_mean.n + c.data_std.n + c.data_norm, 0); /* nothing set */
    }
    static const struct {
        const char *text, *want;
    } check[] = {
        {"channels = 3\ndata_norm = 1\nimage_norm = 1\n", "data_norm: not with image_norm"},
        {"channels = 3\ndata_mean = 0.5,0.5,0.5\ndata_std = 1,1,1\n",
         "data_mean: given, but data_norm is 0"},
        {"channels = 3\ndata_norm = 1\ndata_mean = 0.5,0.5,0.5\n",
         "data_std: missing (give data_mean and data_std together"},
        {"channels = 3\ndata_norm = 1\ndata_mean = 0.5\ndata_std = 1,1,1\n",
         "data_mean: 1 value for images of 3 channels"},
        {"channels = 1\ndata_norm = 1\ndata_mean = 0.5\ndata_std = 1,1\n",
         "data_std: 2 values for images of 1 channel"},
    };
    for (size_t i = 0; i < sizeof check / sizeof check[0]; i++) {
        vit_config c;
        vit_config_default(&c);
        ck_assert_msg(vit_config_parse(&c, NULL, check[i].text, "t") == VIT_OK, "%s",
                      vit_last_error());
        ck_assert_int_eq(vit_config_check(&c), VIT_EINVAL);
        ck_assert_msg(strstr(vit_last_error(), check[i].want), "case %zu: %s", i, vit_last_error());
        ck_assert_ptr_null(vit_model_new(&c));
    }
    /* on, figures not yet known: a config to train (the trainer computes
     * them), not a model */
    vit_config c;
    vit_config_default(&c);
    ck_assert_int_eq(vit_config_set(&c, "data_norm", "1"), VIT_OK);
    ck_assert_int_eq(vit_config_check(&c), VIT_OK);
    ck_assert_ptr_null(vit_model_new(&c));
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "data_norm = 1 without data_mean and data_std"));
}
END_TEST

/* Through a checkpoint and an export: the figures bitwise, the metadata
 * naming them, the loaded models computing what the model did. */
START_TEST(checkpoint_and_export)
{
    vit_model *m = small_model(1);
    vit_real x[B * I], with[B * K], got[B * K];
    inputs(x);
    logits(m, x, B, with);
    vit_run_state st;
    memset(&st, 0, sizeof st);
    vit_rng_seed(&st.rng, 1);
    const char *ck = fu_path("dn.ckpt");
    ck_assert_msg(vit_run_save(ck, m, NULL, NULL, &st) == VIT_OK, "%s", vit_last_error());
    const char *ex = fu_path("dn.safetensors");
    ck_assert_msg(vit_safetensors_save(m, NULL, NULL, ex, NULL) == VIT_OK, "%s", vit_last_error());
    size_t n;
    char *bytes = (char *)fu_read(ex, &n);
    bytes[n - 1] = 0; /* the header is text; the tail is floats */
    ck_assert_ptr_nonnull(strstr(bytes + 8, "\"data_norm\":\"1\",\"data_mean\":\"0.25,0.5,0.625\","
                                            "\"data_std\":\"0.5,0.25,0.125\""));
    ck_assert_ptr_nonnull(strstr(bytes + 8, "then (x - mean[c]) / std[c] for each channel c, mean "
                                            "= [0.25, 0.5, 0.625], std = [0.5, 0.25, 0.125]"));
    free(bytes);
    for (int k = 0; k < 2; k++) {
        vit_model *l = NULL;
        vit_run_state got_st;
        if (k == 0)
            ck_assert_msg(vit_run_load(ck, &l, NULL, NULL, &got_st) == VIT_OK, "%s",
                          vit_last_error());
        else
            ck_assert_msg(vit_safetensors_load(ex, &l) == VIT_OK, "%s", vit_last_error());
        const vit_config *c = vit_model_config(l);
        ck_assert_int_eq(c->data_norm, 1);
        ck_assert_int_eq(c->data_std.n, 3);
        ck_assert_mem_eq(c->data_mean.v, MEAN, sizeof MEAN);
        ck_assert_mem_eq(c->data_std.v, STD, sizeof STD);
        logits(l, x, B, got);
        for (int j = 0; j < B * K; j++) /* weights stored as float32 */
            ck_assert_msg(fabs((double)got[j] - with[j]) < 1e-4, "%s: logit %d: %.9g, before %.9g",
                          k ? "export" : "checkpoint", j, got[j], with[j]);
        if (k == 0)
            vit_run_state_free(&got_st);
        vit_model_free(l);
    }
    vit_model_free(m);
}
END_TEST

/* A made-up colour set: 24 training images of 4x4x3 (channel c's pixels
 * around 0.2 + 0.3 c, the last 8 images brighter, so the validation tail
 * moves the figures), 8 test images, 2 classes. */
enum { TN = 24, TV = 8, TT = 8, TS = 4, TI = TS * TS * 3 };

static void colour_set(vit_dataset *train, vit_dataset *test)
{
    vit_dataset *d[2] = {train, test};
    for (int k = 0; k < 2; k++) {
        int n = k ? TT : TN;
        *d[k] = (vit_dataset){.count = n, .height = TS, .width = TS, .channels = 3, .classes = 2};
        d[k]->images = malloc((size_t)n * TI * sizeof(vit_real));
        d[k]->labels = malloc((size_t)n * sizeof(int));
        ck_assert(d[k]->images && d[k]->labels);
        for (int i = 0; i < n; i++) {
            d[k]->labels[i] = i % 2;
            for (int j = 0; j < TI; j++)
                d[k]->images[(size_t)i * TI + j] =
                    (vit_real)(0.2 + 0.3 * (j % 3) * 0.9 + 0.1 * fmod(0.77 * (i * TI + j), 1.0)
                               + (k == 0 && i >= TN - TV ? 0.05 : 0));
        }
    }
}

static void small_run(vit_config *c, vit_train_config *tc)
{
    vit_config_default(c);
    vit_train_config_default(tc);
    c->dim = 8;
    c->depth = 1;
    c->heads = 2;
    c->mlp = 8;
    c->patch = 2;
    c->patch_stride = 0;
    c->patch_pad = 0;
    c->data_norm = 1;
    tc->epochs = 1;
    tc->batch = 8;
    tc->tta = VIT_TTA_NONE;
    tc->seed = 3;
}

/* The trainer computes the figures from the training part (not the
 * validation tail, not the test); the checkpoint holds them. */
START_TEST(trainer_computes_from_training_part)
{
    vit_dataset train, test;
    colour_set(&train, &test);
    double mean[3], std[3], all_mean[3], all_std[3];
    ck_assert_int_eq(vit_channel_stats(train.images, TN - TV, TS * TS, 3, mean, std), VIT_OK);
    ck_assert_int_eq(vit_channel_stats(train.images, TN, TS * TS, 3, all_mean, all_std), VIT_OK);
    ck_assert(mean[0] != all_mean[0]); /* the tail moves them: the test can fail */
    vit_config c;
    vit_train_config tc;
    small_run(&c, &tc);
    vit_train_opts o = {.out_dir = fu_path("fresh"), .ckpt_every = 1, .val_count = TV};
    vit_train_result res;
    ck_assert_msg(vit_train_run(&c, &tc, &train, &test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    vit_train_result_free(&res);
    vit_model *m = NULL;
    ck_assert_msg(vit_run_load(fu_path("fresh/last.ckpt"), &m, NULL, NULL, NULL) == VIT_OK, "%s",
                  vit_last_error());
    const vit_config *got = vit_model_config(m);
    ck_assert_int_eq(got->data_mean.n, 3);
    ck_assert_mem_eq(got->data_mean.v, mean, sizeof mean);
    ck_assert_mem_eq(got->data_std.v, std, sizeof std);
    vit_model_free(m);
    vit_dataset_free(&train);
    vit_dataset_free(&test);
}
END_TEST

/* Given figures are used as they are; a resumed run keeps them, a
 * fine-tuned one keeps its source's. */
START_TEST(given_kept_by_resume_and_init)
{
    vit_dataset train, test;
    colour_set(&train, &test);
    vit_config c;
    vit_train_config tc;
    small_run(&c, &tc);
    ck_assert_int_eq(vit_config_set(&c, "data_mean", "0.25,0.5,0.625"), VIT_OK);
    ck_assert_int_eq(vit_config_set(&c, "data_std", "0.5,0.25,0.125"), VIT_OK);
    vit_train_opts o = {.out_dir = fu_path("given"), .ckpt_every = 1};
    vit_train_result res;
    ck_assert_msg(vit_train_run(&c, &tc, &train, &test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    vit_train_result_free(&res);
    const char *src = fu_path("given/last.ckpt");
    for (int k = 0; k < 2; k++) { /* 0: resume, 1: fine-tune from it */
        small_run(&c, &tc);
        tc.epochs = 2;
        vit_train_opts r = {.out_dir = fu_path(k ? "ft" : "given"), .ckpt_every = 1};
        if (k)
            r.init_from = src;
        else
            r.resume = src;
        vit_trainer *t = NULL;
        ck_assert_msg(vit_trainer_new(&t, &c, &tc, &train, &test, &r) == VIT_OK, "%s",
                      vit_last_error());
        const vit_config *got = vit_model_config(vit_trainer_model(t));
        ck_assert_int_eq(got->data_norm, 1);
        ck_assert_mem_eq(got->data_mean.v, MEAN, sizeof MEAN);
        ck_assert_mem_eq(got->data_std.v, STD, sizeof STD);
        vit_trainer_free(t);
    }
    /* a fine-tune on gray images cannot keep 3 channels' figures */
    vit_model *m = NULL;
    ck_assert_msg(vit_run_load(src, &m, NULL, NULL, NULL) == VIT_OK, "%s", vit_last_error());
    vit_config gray = *vit_model_config(m);
    gray.channels = 1;
    vit_config_take_arch(&gray, vit_model_config(m));
    vit_adapt_opts ao = {0};
    vit_rng rng;
    vit_rng_seed(&rng, 1);
    vit_model *out = NULL;
    ck_assert_int_eq(vit_model_adapt(m, &gray, &ao, &rng, &out, NULL, 0), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "normalises its 3 channels by its training "
                                                   "set's statistics (data_norm)"));
    ck_assert_ptr_null(out);
    vit_model_free(m);
    vit_dataset_free(&train);
    vit_dataset_free(&test);
}
END_TEST

/* 1 -> 3 channels: the gray figures repeated; equal channels compute what
 * the gray model did. */
START_TEST(gray_to_colour)
{
    vit_config g;
    vit_config_default(&g);
    g.classes = 4;
    g.data_norm = 1;
    g.data_mean = (vit_channel_values){1, {0.25}};
    g.data_std = (vit_channel_values){1, {0.5}};
    vit_model *m = vit_model_new(&g);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    vit_rng rng;
    vit_rng_seed(&rng, 2);
    vit_model_init(m, &rng);
    vit_config c = g;
    c.channels = 3;
    vit_config_take_arch(&c, &g);
    ck_assert_int_eq(c.data_mean.n, 3);
    ck_assert(c.data_mean.v[2] == 0.25 && c.data_std.v[1] == 0.5);
    vit_adapt_opts ao = {.keep_head = 1};
    vit_model *out = NULL;
    ck_assert_msg(vit_model_adapt(m, &c, &ao, &rng, &out, NULL, 0) == VIT_OK, "%s",
                  vit_last_error());
    enum { P = 64 };
    vit_real x[P], x3[3 * P], a[4], b[4];
    for (int j = 0; j < P; j++)
        x[j] = x3[3 * j] = x3[3 * j + 1] = x3[3 * j + 2] = (vit_real)fmod(0.29 * j, 1.0);
    logits(m, x, 1, a);
    logits(out, x3, 1, b);
    for (int j = 0; j < 4; j++)
        ck_assert_msg(fabs((double)a[j] - b[j]) < 1e-4, "logit %d: %.9g vs %.9g", j, a[j], b[j]);
    vit_model_free(m);
    vit_model_free(out);
}
END_TEST

/* Files written before data_norm load without it, and their config text
 * stays as it was (no data_ line). */
START_TEST(old_files_unchanged)
{
    static const char *const files[] = {"data/v1/digits-dim8-epoch1-of-2.ckpt",
                                         "data/v2/digits-dim8-epoch2-step270-of-3.ckpt",
                                         "data/torch_vit.safetensors"};
    for (int i = 0; i < 3; i++) {
        vit_model *m = NULL;
        int rc = i < 2 ? vit_run_load(files[i], &m, NULL, NULL, NULL)
                       : vit_safetensors_load(files[i], &m);
        ck_assert_msg(rc == VIT_OK, "%s: %s", files[i], vit_last_error());
        const vit_config *c = vit_model_config(m);
        ck_assert_int_eq(c->data_norm, 0);
        ck_assert_int_eq(c->data_mean.n + c->data_std.n, 0);
        char text[4096];
        ck_assert_int_gt(vit_config_format(c, NULL, text, sizeof text), 0);
        ck_assert_msg(!strstr(text, "data_"), "%s: %s", files[i], text);
        vit_model_free(m);
    }
}
END_TEST

static Suite *data_norm_suite(void)
{
    Suite *s = suite_create("data_norm");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, stats_closed_form);
    tcase_add_test(tc, model_reads_normalised);
    tcase_add_test(tc, text_bitwise);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, checkpoint_and_export);
    tcase_add_test(tc, trainer_computes_from_training_part);
    tcase_add_test(tc, given_kept_by_resume_and_init);
    tcase_add_test(tc, gray_to_colour);
    tcase_add_test(tc, old_files_unchanged);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fu_run_suite(data_norm_suite, "/tmp/vit_data_norm_XXXXXX"); }
