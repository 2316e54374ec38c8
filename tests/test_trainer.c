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
 *    start-over in a used folder reports where the old run went;
 *  - save_best keeps OUT/best.ckpt at the epoch of the best validation
 *    accuracy (the EPOCH rows say which), and the final test figure is
 *    that model's, scored once (equal to vit_evaluate of best.ckpt);
 *    without a validation set it is refused;
 *  - early_stop ends a run whose validation accuracy stops improving, with
 *    a last.ckpt that resumes; a resumed run remembers the best epoch so
 *    far (it stops where the uninterrupted run would, not N epochs later);
 *  - after a stop inside an epoch, the resumed epoch's row, its images/s
 *    and the result count the whole run, the time before the stop too
 *    (OUT/clock.txt), while the checkpoint stays that of the uninterrupted
 *    run;
 *  - an exploding loss stops the run with VIT_ENUM after the epoch, its
 *    row and checkpoint not written (the last good one is kept);
 *  - warmup_fraction lays the warm-up out over the run's epochs.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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
static void tiny_config(vit_config *c, vit_train_config *tc, int epochs)
{
    vit_config_default(c);
    vit_train_config_default(tc);
    c->patch = 2;
    c->patch_stride = 0;
    c->patch_pad = 0;
    tc->tta = VIT_TTA_NONE;
    c->dim = 16;
    c->depth = 1;
    c->heads = 2;
    c->mlp = 32;
    tc->epochs = epochs;
    tc->batch = 32;
    tc->lr = 3e-3;
    tc->warmup = 1;
    c->init_std = 0.1;
    tc->shift = 1;
    tc->seed = 7;
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

/* Field `col` (0-based) of row `row` (1 = the first epoch) of a metrics.csv,
 * pointing into line. */
static const char *csv_at(const char *path, int row, int col, char line[512])
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    for (int r = 0; r <= row; r++)
        ck_assert_msg(fgets(line, 512, f) != NULL, "%s: no row %d", path, row);
    fclose(f);
    char *p = line;
    for (int c = 0; c < col; c++) {
        p = strchr(p, ',');
        ck_assert_ptr_nonnull(p);
        p++;
    }
    return p;
}

static double csv_field(const char *path, int row, int col)
{
    char line[512];
    return strtod(csv_at(path, row, col, line), NULL);
}

/* Whether that field is empty. */
static int csv_empty(const char *path, int row, int col)
{
    char line[512];
    return *csv_at(path, row, col, line) == ',';
}

START_TEST(test_events_in_order)
{
    load_digits();
    char dir[64], ckpt[128], csv[128];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_trainer_test_XXXXXX");
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", dir);
    snprintf(csv, sizeof csv, "%s/metrics.csv", dir);
    vit_config cfg;
    vit_train_config tc;
    tiny_config(&cfg, &tc, 3);
    static seen s;
    memset(&s, 0, sizeof s);
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1, .val_count = VAL, .on_event = record,
                        .user = &s};
    vit_trainer *t;
    ck_assert_msg(vit_trainer_new(&t, &cfg, &tc, &g_train, &g_test, &o) == VIT_OK, "%s",
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
    ck_assert_double_eq_tol(s.lr[12], tc.lr, 1e-9);
    for (int k = 14; k <= SPE; k++)
        ck_assert_msg(s.lr[k] < s.lr[k - 1], "step %d: lr %g after %g", k, s.lr[k], s.lr[k - 1]);

    /* The EPOCH rows are metrics.csv's (which rounds to 6 decimals). */
    ck_assert_int_eq(s.nrows, 3);
    for (int e = 1; e <= 3; e++) {
        const vit_epoch_metrics *m = &s.rows[e - 1];
        ck_assert_uint_eq(m->epoch, (unsigned long long)e);
        ck_assert_double_eq_tol(csv_field(csv, e, 1), m->train_loss, 1e-6);
        ck_assert_double_eq_tol(csv_field(csv, e, 2), m->train_acc, 1e-6);
        /* With a validation set the epochs do not score the test set:
         * its fields are empty. */
        ck_assert_msg(isnan(m->test_loss) && isnan(m->test_acc), "epoch %d test %g %g", e,
                      m->test_loss, m->test_acc);
        ck_assert_msg(csv_empty(csv, e, 3) && csv_empty(csv, e, 4), "epoch %d: test fields", e);
        ck_assert_double_eq_tol(csv_field(csv, e, 7), m->val_acc, 1e-6);
        ck_assert_double_eq_tol(csv_field(csv, e, 8), m->val_loss, 1e-6);
        ck_assert_msg(m->val_acc > 0 && m->val_acc <= 1, "epoch %d val_acc %g", e, m->val_acc);
        ck_assert_msg(m->val_loss > 0 && isfinite(m->val_loss), "epoch %d val_loss %g", e,
                      m->val_loss);
    }
    /* The test set, scored once at the end, is the final model's score. */
    vit_eval_result er;
    ck_assert_msg(vit_trainer_evaluate(t, &g_test, VIT_TTA_NONE, &er) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_double_eq_tol(res.test_accuracy_plain, er.accuracy, 1e-12);
    ck_assert_double_eq_tol(res.test_loss_plain, er.loss, 1e-9);
    vit_eval_result_free(&er);
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
    vit_train_config tc;
    tiny_config(&cfg, &tc, 2);
    if (_i) { /* every augmentation for real images on: their draws resume too */
        cfg.depth = 2;
        tc.crop_pad = 2;
        tc.flip = 1;
        tc.mixup = 0.8;
        tc.cutmix = 1.0;
        tc.mix_prob = 0.7;
        tc.drop_path = 0.2;
    }
    vit_train_result res;
    vit_train_opts o = {.out_dir = a, .ckpt_every = 1};
    ck_assert_msg(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    vit_train_result_free(&res);

    o.out_dir = b;
    vit_trainer *t;
    ck_assert_int_eq(vit_trainer_new(&t, &cfg, &tc, &g_train, &g_test, &o), VIT_OK);
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
    vit_train_config tc;
    tiny_config(&cfg, &tc, 2);
    vit_train_result res;
    vit_train_opts o = {.out_dir = a, .ckpt_every = 1};
    ck_assert_int_eq(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res), VIT_OK);
    vit_train_result_free(&res);

    /* B: the callback asks for a stop at step 30 (inside epoch 1). */
    static seen s;
    memset(&s, 0, sizeof s);
    s.stop_at = 30;
    o.out_dir = b;
    o.on_event = record;
    o.user = &s;
    ck_assert_msg(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
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
    ck_assert_int_eq(vit_trainer_new(&t, &cfg, &tc, &g_train, &g_test, &o), VIT_OK);
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
    ck_assert_msg(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(res.epochs_done, 2);
    vit_train_result_free(&res);
    o.out_dir = c;
    o.resume = cc;
    ck_assert_int_eq(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res), VIT_OK);
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
    vit_train_config tc;
    tiny_config(&cfg, &tc, 1);
    vit_train_result res;
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1};
    ck_assert_int_eq(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res), VIT_OK);
    vit_train_result_free(&res);

    /* Extended from 1 to 2 epochs: one RESUME_CHANGE, before BEGIN. */
    static seen s;
    memset(&s, 0, sizeof s);
    tc.epochs = 2;
    o.resume = ckpt;
    o.on_event = record;
    o.user = &s;
    vit_trainer *t;
    ck_assert_msg(vit_trainer_new(&t, &cfg, &tc, &g_train, &g_test, &o) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(s.n, 2);
    ck_assert_int_eq(s.kind[0], VIT_TRAIN_RESUME_CHANGE);
    ck_assert_str_eq(s.key, "epochs");
    ck_assert_str_eq(s.old_value, "1");
    ck_assert_str_eq(s.new_value, "2");
    ck_assert_int_eq(s.kind[1], VIT_TRAIN_BEGIN);
    ck_assert_int_eq(vit_trainer_train_config(t)->epochs, 2);
    ck_assert_uint_eq(vit_trainer_progress(t)->start_epoch, 1);
    vit_trainer_free(t);

    /* Starting over in the folder: the old run moves aside first. */
    memset(&s, 0, sizeof s);
    o.resume = NULL;
    o.overwrite = 1;
    ck_assert_int_eq(vit_trainer_new(&t, &cfg, &tc, &g_train, &g_test, &o), VIT_OK);
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
    ck_assert_int_eq(vit_trainer_new(&t, NULL, &tc, &g_train, &g_test, &o), VIT_EINVAL);
    ck_assert_ptr_null(t);
    t = (vit_trainer *)&s;
    ck_assert_int_eq(vit_trainer_new(&t, &cfg, NULL, &g_train, &g_test, &o), VIT_EINVAL);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(vit_trainer_step(NULL), VIT_EINVAL);
    fu_remove_tree(dir);
}
END_TEST

/* A tiny run of the digits stopped after its first epoch of two, in a
 * new folder dir (64 bytes) whose checkpoint is ckpt (128 bytes), with
 * *o's data_spec and val_count; *o is left as the run's opts. */
static void first_epoch_run(char *dir, char *ckpt, vit_config *cfg, vit_train_config *tc,
                            vit_train_opts *o)
{
    load_digits();
    fu_mkdtemp(dir, 64, "/tmp/vit_trainer_test_XXXXXX");
    snprintf(ckpt, 128, "%s/last.ckpt", dir);
    tiny_config(cfg, tc, 2);
    *o = (vit_train_opts){.out_dir = dir, .ckpt_every = 1, .stop_after_epochs = 1,
                          .data_spec = o->data_spec, .val_count = o->val_count};
    vit_train_result res;
    ck_assert_int_eq(vit_train_run(cfg, tc, &g_train, &g_test, o, &res), VIT_OK);
    vit_train_result_free(&res);
}

START_TEST(test_checkpoint_knows_its_data)
{
    char dir[64], ckpt[128];
    vit_config cfg;
    vit_train_config tc;
    vit_train_result res;
    vit_train_opts o = {.data_spec = "digits"};
    first_epoch_run(dir, ckpt, &cfg, &tc, &o);
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
    ck_assert_int_eq(got.val_count, 0);

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
    ck_assert_int_eq(vit_train_run(&cfg, &tc, &other, &g_test, &o, &res), VIT_EDATA);
    ck_assert_msg(strstr(vit_last_error(), "1437 train + 360 test images") != NULL
                  && strstr(vit_last_error(), "'digits'") != NULL, "%s", vit_last_error());
    o.other_data = 1; /* allowed: trains on, and records the new data */
    ck_assert_msg(vit_train_run(&cfg, &tc, &other, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    vit_train_result_free(&res);
    ck_assert_int_eq(vit_run_data_read(ckpt, &got, &known), VIT_OK);
    ck_assert(vit_run_data_same(&got, &changed));
    ck_assert_str_eq(got.spec, "digits"); /* no spec given: the run's is kept */
    free(other.labels);
    fu_remove_tree(dir);
}
END_TEST

/* The validation tail is in the record, and a resume that would hold out
 * another is refused, naming both counts; the same count goes on. */
START_TEST(test_checkpoint_records_val_count)
{
    char dir[64], ckpt[128];
    vit_config cfg;
    vit_train_config tc;
    vit_train_result res;
    vit_train_opts o = {.val_count = 300};
    first_epoch_run(dir, ckpt, &cfg, &tc, &o);
    vit_run_data got;
    int known = 0;
    ck_assert_int_eq(vit_run_data_read(ckpt, &got, &known), VIT_OK);
    ck_assert_int_eq(known, 1);
    ck_assert_int_eq(got.val_count, 300);
    ck_assert_int_eq(got.train_count, N_TRAIN); /* the tail is counted in */

    o.resume = ckpt;
    o.stop_after_epochs = 0;
    o.val_count = 200;
    ck_assert_int_eq(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "last 300 training images") != NULL
                  && strstr(vit_last_error(), "asks for 200") != NULL, "%s", vit_last_error());
    o.val_count = 300;
    ck_assert_msg(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(res.epochs_done, 2);
    vit_train_result_free(&res);
    ck_assert_int_eq(vit_run_data_read(ckpt, &got, &known), VIT_OK);
    ck_assert_int_eq(got.val_count, 300);
    fu_remove_tree(dir);
}
END_TEST

/* ---- choosing the model on validation, and the run's edges ------------ */

/* A validation set of 300 (the training part: 1137 images in 36 steps). */
#define SEL_VAL 300

/* The EPOCH rows the callback saw; a pause at step sleep_at, a stop at
 * stop_at (0: none). */
typedef struct rows {
    int n;
    vit_epoch_metrics row[32];
    double ips[32];
    unsigned long long sleep_at, stop_at;
    long warmup_steps;
} rows;

static int record_rows(const vit_train_event *ev, void *user)
{
    rows *r = user;
    if (ev->kind == VIT_TRAIN_EPOCH && r->n < 32) {
        r->ips[r->n] = ev->images_per_second;
        r->row[r->n++] = *ev->epoch;
    }
    if (ev->kind == VIT_TRAIN_BEGIN)
        r->warmup_steps = ev->at->warmup_steps;
    if (ev->kind == VIT_TRAIN_STEP && r->sleep_at && ev->at->step == r->sleep_at) {
        struct timespec ts = {0, 400000000}; /* 0.4 s: the time before the stop */
        nanosleep(&ts, NULL);
    }
    return ev->kind == VIT_TRAIN_STEP && r->stop_at && ev->at->step == r->stop_at;
}

START_TEST(test_save_best_scores_the_kept_model)
{
    load_digits();
    char dir[64], best[128];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_trainer_test_XXXXXX");
    snprintf(best, sizeof best, "%s/best.ckpt", dir);
    vit_config cfg;
    vit_train_config tc;
    tiny_config(&cfg, &tc, 6);
    tc.lr = 2e-2; /* a rate that overshoots: the last epoch is not always the best */
    static rows r;
    memset(&r, 0, sizeof r);
    vit_train_result res;
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1, .save_best = VIT_BEST_ACCURACY};
    /* Without a validation set there is nothing to choose by. */
    ck_assert_int_eq(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "save_best") && strstr(vit_last_error(), "val_count"),
                  "%s", vit_last_error());
    o.val_count = SEL_VAL;
    o.on_event = record_rows;
    o.user = &r;
    ck_assert_msg(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(r.n, 6);
    int want = 0; /* the first epoch of the highest validation accuracy */
    for (int i = 0; i < r.n; i++)
        if (want == 0 || r.row[i].val_acc > r.row[want - 1].val_acc)
            want = i + 1;
    ck_assert_int_eq(res.best_epoch, want);
    ck_assert_double_eq_tol(res.best_score, r.row[want - 1].val_acc, 1e-12);
    ck_assert_double_eq_tol(res.val_accuracy, r.row[want - 1].val_acc, 1e-12);
    ck_assert(r.row[want - 1].val_loss > 0 && r.row[want - 1].val_loss < 5);
    /* best.ckpt is that epoch's model, and the test figure is its own. */
    vit_model *m = NULL;
    vit_run_state st;
    memset(&st, 0, sizeof st);
    vit_train_config btc;
    ck_assert_int_eq(vit_run_load(best, &m, &btc, NULL, &st), VIT_OK);
    ck_assert_uint_eq(st.epoch, (unsigned long long)want);
    vit_tape *tape = vit_tape_new();
    vit_eval_result ev;
    ck_assert_int_eq(vit_evaluate_tta(m, tape, &g_test, 64, btc.tta, &ev), VIT_OK);
    ck_assert_double_eq_tol(res.test_accuracy, ev.accuracy, 1e-12);
    ck_assert_double_eq_tol(res.test_loss, ev.loss, 1e-9);
    vit_eval_result_free(&ev);
    vit_tape_free(tape);
    vit_model_free(m);
    vit_run_state_free(&st);
    vit_train_result_free(&res);
    fu_remove_tree(dir);
}
END_TEST

START_TEST(test_early_stop_resumes_with_its_best)
{
    load_digits();
    char dir[64], a[128], b[128], last_b[160];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_trainer_test_XXXXXX");
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(last_b, sizeof last_b, "%s/last.ckpt", b);
    vit_config cfg;
    vit_train_config tc;
    tiny_config(&cfg, &tc, 12);
    /* A rate too small to move a weight: the validation accuracy of epoch
     * 1 is never beaten, so a patience of 2 ends the run after epoch 3. */
    tc.lr = 1e-12;
    tc.min_lr = 0;
    vit_train_result res;
    vit_train_opts o = {.out_dir = a, .ckpt_every = 1, .val_count = SEL_VAL, .early_stop = 2};
    ck_assert_msg(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(res.early_stopped, 1);
    ck_assert_int_eq(res.epochs_done, 3);
    ck_assert_int_eq(res.epochs, 12);
    vit_train_result_free(&res);

    /* Stopped after epoch 2 and resumed: the best (epoch 1) is remembered,
     * so the resumed run stops after epoch 3 too, not after epoch 4. */
    o.out_dir = b;
    o.stop_after_epochs = 2;
    ck_assert_int_eq(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res), VIT_OK);
    ck_assert_int_eq(res.epochs_done, 2);
    vit_train_result_free(&res);
    vit_model *m = NULL;
    vit_run_state st;
    memset(&st, 0, sizeof st);
    ck_assert_int_eq(vit_run_load(last_b, &m, NULL, NULL, &st), VIT_OK);
    ck_assert_uint_eq(st.best_epoch, 1);
    ck_assert(st.best_score > 0.05 && st.best_score <= 1);
    vit_model_free(m);
    vit_run_state_free(&st);
    o.stop_after_epochs = 0;
    o.resume = last_b;
    ck_assert_msg(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(res.early_stopped, 1);
    ck_assert_int_eq(res.epochs_done, 3);
    vit_train_result_free(&res);
    fu_remove_tree(dir);
}
END_TEST

START_TEST(test_resumed_epoch_counts_the_whole_run)
{
    load_digits();
    char dir[64], ckpt[128];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_trainer_test_XXXXXX");
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", dir);
    vit_config cfg;
    vit_train_config tc;
    tiny_config(&cfg, &tc, 1);
    static rows r;
    memset(&r, 0, sizeof r);
    r.sleep_at = 10; /* 0.4 s spent before the stop at step 20, inside the epoch */
    r.stop_at = 20;
    vit_train_result res;
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1, .on_event = record_rows, .user = &r};
    ck_assert_int_eq(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res), VIT_OK);
    ck_assert_int_eq(res.interrupted, 1);
    ck_assert(res.run_seconds >= 0.4);
    vit_train_result_free(&res);
    r.sleep_at = r.stop_at = 0;
    o.resume = ckpt;
    ck_assert_msg(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(r.n, 1);
    /* The row's time holds the 0.4 s before the stop, and images/s is the
     * epoch's images over it (the whole run's), not over the resumed part. */
    ck_assert_msg(r.row[0].seconds >= 0.4, "row seconds %g", r.row[0].seconds);
    ck_assert_double_eq_tol(r.ips[0], g_train.count / r.row[0].seconds, 1e-6 * r.ips[0]);
    ck_assert(res.run_seconds >= r.row[0].seconds && res.run_seconds > res.seconds + 0.35);
    ck_assert_double_eq_tol(res.run_images_per_second, g_train.count / res.run_seconds,
                            1e-6 * res.run_images_per_second);
    vit_train_result_free(&res);
    fu_remove_tree(dir);
}
END_TEST

START_TEST(test_exploding_loss_stops_the_run)
{
    load_digits();
    char dir[64], csv[128];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_trainer_test_XXXXXX");
    snprintf(csv, sizeof csv, "%s/metrics.csv", dir);
    vit_config cfg;
    vit_train_config tc;
    tiny_config(&cfg, &tc, 30);
    tc.lr = 5;
    static rows r;
    memset(&r, 0, sizeof r);
    vit_train_result res;
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1, .on_event = record_rows, .user = &r};
    int rc = vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res);
    ck_assert_int_eq(rc, VIT_ENUM);
    ck_assert_msg(strstr(vit_last_error(), "diverged") && strstr(vit_last_error(), "times chance"),
                  "%s", vit_last_error());
    ck_assert_int_lt(r.n, 30);
    for (int i = 0; i < r.n; i++) /* every row written is a sane one */
        ck_assert(isfinite(r.row[i].train_loss) && r.row[i].train_loss < 10 * log(10));
    int lines = 0;
    FILE *f = fopen(csv, "r");
    ck_assert_ptr_nonnull(f);
    for (int ch; (ch = fgetc(f)) != EOF;)
        lines += ch == '\n';
    fclose(f);
    ck_assert_int_eq(lines, 1 + r.n);
    fu_remove_tree(dir);
}
END_TEST

START_TEST(test_warmup_follows_the_epochs)
{
    load_digits();
    char dir[64];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_trainer_test_XXXXXX");
    vit_config cfg;
    vit_train_config tc;
    tiny_config(&cfg, &tc, 28);
    tc.warmup = 5; /* replaced by a 28th of the run: one epoch */
    static rows r;
    memset(&r, 0, sizeof r);
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1, .stop_after_epochs = 1,
                        .warmup_fraction = 1 / 28.0, .on_event = record_rows, .user = &r};
    vit_train_result res;
    ck_assert_int_eq(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res), VIT_OK);
    long spe = (g_train.count + 31) / 32;
    ck_assert_int_eq(r.warmup_steps, spe);
    vit_train_result_free(&res);
    o.warmup_fraction = 1.5;
    o.overwrite = 1;
    ck_assert_int_eq(vit_train_run(&cfg, &tc, &g_train, &g_test, &o, &res), VIT_EINVAL);
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
    tcase_add_test(tc, test_checkpoint_records_val_count);
    tcase_add_test(tc, test_save_best_scores_the_kept_model);
    tcase_add_test(tc, test_early_stop_resumes_with_its_best);
    tcase_add_test(tc, test_resumed_epoch_counts_the_whole_run);
    tcase_add_test(tc, test_exploding_loss_stops_the_run);
    tcase_add_test(tc, test_warmup_follows_the_epochs);
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
