/*
 * tests/test_trainer.c - the training loop as an object (vit/train.h:
 * vit_trainer_*) and the events it reports (float32 build).
 *
 *  - events: BEGIN once before any step; one STEP per optimizer step with
 *    the step counting up by one; after each epoch's last step an EPOCH
 *    whose row equals the metrics.csv row; a CHECKPOINT after each epoch
 *    (ckpt_every 1) naming OUT/last.ckpt; losses finite, learning rates
 *    those of the schedule (warm-up rising);
 *  - a run driven by vit_trainer_epoch and vit_trainer_step ends in the
 *    same checkpoint, bit for bit, as vit_train_run;
 *  - a stop asked for by the callback (mid-epoch) or by
 *    vit_trainer_request_stop leaves a checkpoint of that step, further
 *    steps are refused, and resuming gives the uninterrupted run's
 *    checkpoint bit for bit (also with crop_pad, flip, mixup, cutmix and
 *    drop_path on);
 *  - a resume that extends the run reports the change as an event; a
 *    start-over in a used folder reports where the old run went.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "file_util.h"
#include "vit/checkpoint.h"
#include "vit/data.h"
#include "vit/model.h"
#include "vit/train.h"

#define DIGITS "../data/digits.csv.gz"
#define N_TRAIN 1437
#define VAL 101 /* the training part: 1336 images, 42 steps of 32 (the last of 24) */
#define SPE 42

static vit_dataset g_train, g_test;

static void load_digits(void)
{
    if (g_train.count)
        return;
    int rc = vit_data_load_digits(DIGITS, N_TRAIN, &g_train, &g_test);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
}

/* A model small enough for a few epochs in a second, with shift
 * augmentation so that the generator's draws must resume exactly too. */
static void tiny_config(vit_config *c, int epochs)
{
    vit_config_default(c);
    c->patch = 2;
    c->patch_stride = 0;
    c->patch_pad = 0;
    c->tta = VIT_TTA_NONE;
    c->dim = 16;
    c->depth = 1;
    c->heads = 2;
    c->mlp = 32;
    c->epochs = epochs;
    c->batch = 32;
    c->lr = 3e-3;
    c->warmup = 1;
    c->init_std = 0.1;
    c->shift = 1;
    c->seed = 7;
}

/* What the callback saw. */
#define MAX_EVENTS 1024
typedef struct seen {
    int n;
    vit_train_event_kind kind[MAX_EVENTS];
    unsigned long long step[MAX_EVENTS], epoch[MAX_EVENTS], epoch_step[MAX_EVENTS];
    double loss[MAX_EVENTS], lr[MAX_EVENTS];
    vit_epoch_metrics rows[16];
    int nrows;
    char path[256], key[32], old_value[32], new_value[32];
    unsigned long long stop_at; /* ask for a stop at this step (0: never) */
} seen;

static int record(const vit_train_event *ev, void *user)
{
    seen *s = user;
    ck_assert_int_lt(s->n, MAX_EVENTS);
    ck_assert_ptr_nonnull(ev->trainer);
    ck_assert_ptr_nonnull(ev->at);
    int i = s->n++;
    s->kind[i] = ev->kind;
    s->step[i] = ev->at->step;
    s->epoch[i] = ev->at->epoch;
    s->epoch_step[i] = ev->at->epoch_step;
    s->loss[i] = ev->loss;
    s->lr[i] = ev->lr;
    if (ev->kind == VIT_TRAIN_EPOCH) {
        ck_assert_int_lt(s->nrows, 16);
        s->rows[s->nrows++] = *ev->epoch;
    }
    if (ev->kind == VIT_TRAIN_CHECKPOINT || ev->kind == VIT_TRAIN_SET_ASIDE)
        snprintf(s->path, sizeof s->path, "%s", ev->path);
    if (ev->kind == VIT_TRAIN_RESUME_CHANGE) {
        snprintf(s->key, sizeof s->key, "%s", ev->key);
        snprintf(s->old_value, sizeof s->old_value, "%s", ev->old_value);
        snprintf(s->new_value, sizeof s->new_value, "%s", ev->new_value);
    }
    return ev->kind == VIT_TRAIN_STEP && s->stop_at && ev->at->step == s->stop_at;
}

/* Two checkpoints hold the same run: counters, generator, config and every
 * tensor (parameters and Adam moments), bit for bit. */
static void assert_same_ckpt(const char *pa, const char *pb)
{
    vit_ckpt a, b;
    ck_assert_int_eq(vit_ckpt_read(pa, &a), VIT_OK);
    ck_assert_int_eq(vit_ckpt_read(pb, &b), VIT_OK);
    ck_assert_uint_eq(a.step, b.step);
    ck_assert_uint_eq(a.epoch, b.epoch);
    ck_assert(memcmp(a.rng, b.rng, sizeof a.rng) == 0);
    ck_assert_str_eq(a.config, b.config);
    ck_assert_int_eq(a.ntensors, b.ntensors);
    ck_assert_int_gt(a.ntensors, 2);
    for (int i = 0; i < a.ntensors; i++) {
        const vit_ckpt_tensor *ta = &a.tensors[i], *tb = vit_ckpt_find(&b, ta->name);
        ck_assert_msg(tb != NULL, "%s missing", ta->name);
        size_t count = 1;
        for (int d = 0; d < ta->ndim; d++)
            count *= (size_t)ta->dims[d];
        ck_assert_int_eq(ta->ndim, tb->ndim);
        ck_assert_msg(memcmp(ta->data, tb->data, count * sizeof(vit_real)) == 0, "%s differs",
                      ta->name);
    }
    vit_ckpt_free(&a);
    vit_ckpt_free(&b);
}

/* Field `col` (0-based) of row `row` (1 = the first epoch) of a metrics.csv. */
static double csv_field(const char *path, int row, int col)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char line[512];
    for (int r = 0; r <= row; r++)
        ck_assert_msg(fgets(line, sizeof line, f) != NULL, "%s: no row %d", path, row);
    fclose(f);
    char *p = line;
    for (int c = 0; c < col; c++) {
        p = strchr(p, ',');
        ck_assert_ptr_nonnull(p);
        p++;
    }
    return strtod(p, NULL);
}

START_TEST(test_events_in_order)
{
    load_digits();
    char dir[64], ckpt[128], csv[128];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_trainer_test_XXXXXX");
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", dir);
    snprintf(csv, sizeof csv, "%s/metrics.csv", dir);
    vit_config cfg;
    tiny_config(&cfg, 3);
    static seen s;
    memset(&s, 0, sizeof s);
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1, .val_count = VAL, .on_event = record,
                        .user = &s};
    vit_trainer *t;
    ck_assert_msg(vit_trainer_new(&t, &cfg, &g_train, &g_test, &o) == VIT_OK, "%s",
                  vit_last_error());
    const vit_train_progress *at = vit_trainer_progress(t);
    ck_assert_int_eq(at->steps_per_epoch, SPE);
    ck_assert_int_eq(at->total_steps, 3 * SPE);
    ck_assert_int_eq(at->train_count, N_TRAIN - VAL);
    ck_assert_int_eq(s.n, 1);
    ck_assert_int_eq(s.kind[0], VIT_TRAIN_BEGIN);
    vit_train_result res;
    ck_assert_msg(vit_trainer_fit(t, &res) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(res.epochs_done, 3);
    ck_assert(at->finished && !at->stopped);

    /* BEGIN, then per epoch: SPE steps, EPOCH, CHECKPOINT. */
    ck_assert_int_eq(s.n, 1 + 3 * (SPE + 2));
    int i = 1;
    for (int e = 1; e <= 3; e++) {
        for (int k = 1; k <= SPE; k++, i++) {
            ck_assert_int_eq(s.kind[i], VIT_TRAIN_STEP);
            ck_assert_uint_eq(s.step[i], (unsigned long long)((e - 1) * SPE + k));
            ck_assert_uint_eq(s.epoch[i], (unsigned long long)(e - 1));
            ck_assert_uint_eq(s.epoch_step[i], (unsigned long long)k);
            ck_assert_msg(isfinite(s.loss[i]) && s.loss[i] > 0, "loss %g", s.loss[i]);
        }
        ck_assert_int_eq(s.kind[i], VIT_TRAIN_EPOCH);
        ck_assert_uint_eq(s.epoch[i], (unsigned long long)e);
        ck_assert_uint_eq(s.epoch_step[i], 0);
        i++;
        ck_assert_int_eq(s.kind[i], VIT_TRAIN_CHECKPOINT);
        i++;
    }
    ck_assert_str_eq(s.path, ckpt);
    /* The warm-up of 1 epoch (42 steps) is capped at a tenth of the run's
     * 126 steps: 12 steps rising to the peak, then the cosine falls. */
    ck_assert_int_eq(at->warmup_steps, 12);
    for (int k = 2; k <= 12; k++)
        ck_assert_msg(s.lr[k] > s.lr[k - 1], "step %d: lr %g after %g", k, s.lr[k], s.lr[k - 1]);
    ck_assert_double_eq_tol(s.lr[12], cfg.lr, 1e-9);
    for (int k = 14; k <= SPE; k++)
        ck_assert_msg(s.lr[k] < s.lr[k - 1], "step %d: lr %g after %g", k, s.lr[k], s.lr[k - 1]);

    /* The EPOCH rows are metrics.csv's (which rounds to 6 decimals). */
    ck_assert_int_eq(s.nrows, 3);
    for (int e = 1; e <= 3; e++) {
        const vit_epoch_metrics *m = &s.rows[e - 1];
        ck_assert_uint_eq(m->epoch, (unsigned long long)e);
        ck_assert_double_eq_tol(csv_field(csv, e, 1), m->train_loss, 1e-6);
        ck_assert_double_eq_tol(csv_field(csv, e, 2), m->train_acc, 1e-6);
        ck_assert_double_eq_tol(csv_field(csv, e, 3), m->test_loss, 1e-6);
        ck_assert_double_eq_tol(csv_field(csv, e, 4), m->test_acc, 1e-6);
        ck_assert_double_eq_tol(csv_field(csv, e, 7), m->val_acc, 1e-6);
        ck_assert_msg(m->val_acc > 0 && m->val_acc <= 1, "epoch %d val_acc %g", e, m->val_acc);
    }
    /* The last row's one-pass test score is the result's. */
    ck_assert_double_eq_tol(res.test_accuracy, s.rows[2].test_acc, 1e-12);
    /* Stepping a finished run is refused. */
    ck_assert_int_eq(vit_trainer_step(t), VIT_EINVAL);
    vit_train_result_free(&res);
    vit_trainer_free(t);
    fu_remove_tree(dir);
}
END_TEST

START_TEST(test_stepping_equals_one_call)
{
    load_digits();
    char dir[64], a[128], b[128], ca[160], cb[160];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_trainer_test_XXXXXX");
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(ca, sizeof ca, "%s/last.ckpt", a);
    snprintf(cb, sizeof cb, "%s/last.ckpt", b);
    vit_config cfg;
    tiny_config(&cfg, 2);
    if (_i) { /* every augmentation for real images on: their draws resume too */
        cfg.depth = 2;
        cfg.crop_pad = 2;
        cfg.flip = 1;
        cfg.mixup = 0.8;
        cfg.cutmix = 1.0;
        cfg.mix_prob = 0.7;
        cfg.drop_path = 0.2;
    }
    vit_train_result res;
    vit_train_opts o = {.out_dir = a, .ckpt_every = 1};
    ck_assert_msg(vit_train_run(&cfg, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    vit_train_result_free(&res);

    o.out_dir = b;
    vit_trainer *t;
    ck_assert_int_eq(vit_trainer_new(&t, &cfg, &g_train, &g_test, &o), VIT_OK);
    long spe = vit_trainer_progress(t)->steps_per_epoch;
    ck_assert_int_eq(vit_trainer_epoch(t), VIT_OK); /* epoch 1 in one call */
    ck_assert_uint_eq(vit_trainer_progress(t)->epoch, 1);
    ck_assert_uint_eq(vit_trainer_progress(t)->epoch_step, 0);
    for (long k = 0; k < spe; k++) /* epoch 2 step by step */
        ck_assert_msg(vit_trainer_step(t) == VIT_OK, "%s", vit_last_error());
    ck_assert(vit_trainer_progress(t)->finished);
    ck_assert_int_eq(vit_trainer_step(t), VIT_EINVAL);
    vit_trainer_free(t);
    assert_same_ckpt(ca, cb);
    fu_remove_tree(dir);
}
END_TEST

START_TEST(test_stop_and_resume_exact)
{
    load_digits();
    char dir[64], a[128], b[128], c[128], ca[160], cb[160], cc[160];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_trainer_test_XXXXXX");
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(c, sizeof c, "%s/c", dir);
    snprintf(ca, sizeof ca, "%s/last.ckpt", a);
    snprintf(cb, sizeof cb, "%s/last.ckpt", b);
    snprintf(cc, sizeof cc, "%s/last.ckpt", c);
    vit_config cfg;
    tiny_config(&cfg, 2);
    vit_train_result res;
    vit_train_opts o = {.out_dir = a, .ckpt_every = 1};
    ck_assert_int_eq(vit_train_run(&cfg, &g_train, &g_test, &o, &res), VIT_OK);
    vit_train_result_free(&res);

    /* B: the callback asks for a stop at step 30 (inside epoch 1). */
    static seen s;
    memset(&s, 0, sizeof s);
    s.stop_at = 30;
    o.out_dir = b;
    o.on_event = record;
    o.user = &s;
    ck_assert_msg(vit_train_run(&cfg, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(res.interrupted, 1);
    ck_assert_uint_eq(res.steps, 30);
    ck_assert_uint_eq(res.epoch_step, 30);
    ck_assert_int_eq(res.epochs_done, 0);
    ck_assert_int_eq(s.kind[s.n - 1], VIT_TRAIN_CHECKPOINT); /* the stop's checkpoint, last */
    ck_assert_uint_eq(s.step[s.n - 1], 30);
    vit_ckpt k;
    ck_assert_int_eq(vit_ckpt_read(cb, &k), VIT_OK);
    ck_assert_uint_eq(k.step, 30);
    vit_ckpt_free(&k);

    /* C: vit_trainer_request_stop after one epoch and 5 steps. */
    o.out_dir = c;
    o.on_event = NULL;
    vit_trainer *t;
    ck_assert_int_eq(vit_trainer_new(&t, &cfg, &g_train, &g_test, &o), VIT_OK);
    ck_assert_int_eq(vit_trainer_epoch(t), VIT_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(vit_trainer_step(t), VIT_OK);
    vit_trainer_request_stop(t);
    ck_assert_int_eq(vit_trainer_step(t), VIT_OK);
    const vit_train_progress *at = vit_trainer_progress(t);
    ck_assert(at->stopped && !at->finished);
    ck_assert_uint_eq(at->epoch, 1);
    ck_assert_uint_eq(at->epoch_step, 5);
    ck_assert_int_eq(vit_trainer_step(t), VIT_EINVAL);
    ck_assert_int_eq(vit_trainer_epoch(t), VIT_EINVAL);
    vit_trainer_free(t);

    /* Both resumed to the end: the uninterrupted run, bit for bit. */
    o.on_event = NULL;
    o.out_dir = b;
    o.resume = cb;
    ck_assert_msg(vit_train_run(&cfg, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(res.epochs_done, 2);
    vit_train_result_free(&res);
    o.out_dir = c;
    o.resume = cc;
    ck_assert_int_eq(vit_train_run(&cfg, &g_train, &g_test, &o, &res), VIT_OK);
    vit_train_result_free(&res);
    assert_same_ckpt(ca, cb);
    assert_same_ckpt(ca, cc);
    fu_remove_tree(dir);
}
END_TEST

START_TEST(test_resume_and_set_aside_events)
{
    load_digits();
    char dir[64], ckpt[128], moved[128];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_trainer_test_XXXXXX");
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", dir);
    snprintf(moved, sizeof moved, "%s/replaced-1", dir);
    vit_config cfg;
    tiny_config(&cfg, 1);
    vit_train_result res;
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1};
    ck_assert_int_eq(vit_train_run(&cfg, &g_train, &g_test, &o, &res), VIT_OK);
    vit_train_result_free(&res);

    /* Extended from 1 to 2 epochs: one RESUME_CHANGE, before BEGIN. */
    static seen s;
    memset(&s, 0, sizeof s);
    cfg.epochs = 2;
    o.resume = ckpt;
    o.on_event = record;
    o.user = &s;
    vit_trainer *t;
    ck_assert_msg(vit_trainer_new(&t, &cfg, &g_train, &g_test, &o) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(s.n, 2);
    ck_assert_int_eq(s.kind[0], VIT_TRAIN_RESUME_CHANGE);
    ck_assert_str_eq(s.key, "epochs");
    ck_assert_str_eq(s.old_value, "1");
    ck_assert_str_eq(s.new_value, "2");
    ck_assert_int_eq(s.kind[1], VIT_TRAIN_BEGIN);
    ck_assert_int_eq(vit_trainer_config(t)->epochs, 2);
    ck_assert_uint_eq(vit_trainer_progress(t)->start_epoch, 1);
    vit_trainer_free(t);

    /* Starting over in the folder: the old run moves aside first. */
    memset(&s, 0, sizeof s);
    o.resume = NULL;
    o.overwrite = 1;
    ck_assert_int_eq(vit_trainer_new(&t, &cfg, &g_train, &g_test, &o), VIT_OK);
    ck_assert_int_eq(s.kind[0], VIT_TRAIN_SET_ASIDE);
    ck_assert_str_eq(s.path, moved);
    ck_assert_int_eq(s.kind[1], VIT_TRAIN_BEGIN);
    char old_ckpt[160];
    snprintf(old_ckpt, sizeof old_ckpt, "%s/last.ckpt", moved);
    struct stat st;
    ck_assert_int_eq(stat(old_ckpt, &st), 0);
    vit_trainer_free(t);

    /* Bad arguments: no trainer, a message naming the call. */
    t = (vit_trainer *)&s;
    ck_assert_int_eq(vit_trainer_new(&t, NULL, &g_train, &g_test, &o), VIT_EINVAL);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(vit_trainer_step(NULL), VIT_EINVAL);
    fu_remove_tree(dir);
}
END_TEST

START_TEST(test_checkpoint_knows_its_data)
{
    load_digits();
    char dir[64], ckpt[128];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_trainer_test_XXXXXX");
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", dir);
    vit_config cfg;
    tiny_config(&cfg, 2);
    vit_train_result res;
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1, .stop_after_epochs = 1,
                        .data_spec = "digits"};
    ck_assert_int_eq(vit_train_run(&cfg, &g_train, &g_test, &o, &res), VIT_OK);
    vit_train_result_free(&res);
    vit_run_data got, want;
    int known = 0;
    ck_assert_int_eq(vit_run_data_read(ckpt, &got, &known), VIT_OK);
    ck_assert_int_eq(known, 1);
    ck_assert_int_eq(vit_run_data_of(&g_train, &g_test, "digits", &want), VIT_OK);
    ck_assert(vit_run_data_same(&got, &want));
    ck_assert_str_eq(got.spec, "digits");
    ck_assert_int_eq(got.train_count, N_TRAIN);
    ck_assert_int_eq(got.test_count, g_test.count);
    ck_assert_int_eq(got.height * got.width * got.channels, 64);

    /* One label changed is other data: refused on resume, naming both. */
    vit_dataset other = g_train;
    other.labels = malloc((size_t)other.count * sizeof *other.labels);
    memcpy(other.labels, g_train.labels, (size_t)other.count * sizeof *other.labels);
    other.labels[700] = (other.labels[700] + 1) % 10;
    vit_run_data changed;
    ck_assert_int_eq(vit_run_data_of(&other, &g_test, NULL, &changed), VIT_OK);
    ck_assert(!vit_run_data_same(&got, &changed));
    o.resume = ckpt;
    o.stop_after_epochs = 0;
    o.data_spec = NULL;
    ck_assert_int_eq(vit_train_run(&cfg, &other, &g_test, &o, &res), VIT_EDATA);
    ck_assert_msg(strstr(vit_last_error(), "1437 train + 360 test images") != NULL
                  && strstr(vit_last_error(), "'digits'") != NULL, "%s", vit_last_error());
    o.other_data = 1; /* allowed: trains on, and records the new data */
    ck_assert_msg(vit_train_run(&cfg, &other, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    vit_train_result_free(&res);
    ck_assert_int_eq(vit_run_data_read(ckpt, &got, &known), VIT_OK);
    ck_assert(vit_run_data_same(&got, &changed));
    ck_assert_str_eq(got.spec, "digits"); /* no spec given: the run's is kept */
    free(other.labels);
    fu_remove_tree(dir);
}
END_TEST

static Suite *trainer_suite(void)
{
    Suite *s = suite_create("trainer");
    TCase *tc = tcase_create("trainer");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_events_in_order);
    tcase_add_test(tc, test_stepping_equals_one_call);
    tcase_add_loop_test(tc, test_stop_and_resume_exact, 0, 2);
    tcase_add_test(tc, test_resume_and_set_aside_events);
    tcase_add_test(tc, test_checkpoint_knows_its_data);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    vit_set_threads(1);
    SRunner *sr = srunner_create(trainer_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    vit_dataset_free(&g_train);
    vit_dataset_free(&g_test);
    return failed ? 1 : 0;
}
