/*
 * tests/test_selection.c - choosing the model on the validation set, and
 * the run's edges (vit/train.h, float32 build):
 *
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
#include <time.h>
#include <unistd.h>

#include "file_util.h"
#include "vit/checkpoint.h"
#include "vit/data.h"
#include "vit/model.h"
#include "vit/train.h"

#define DIGITS "../data/digits.csv.gz"
#define N_TRAIN 1437
#define VAL 300

static vit_dataset g_train, g_test;

static void load_digits(void)
{
    if (g_train.count)
        return;
    int rc = vit_data_load_digits(DIGITS, N_TRAIN, &g_train, &g_test);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
}

/* A model that trains a few epochs in a second or so. */
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
    c->seed = 7;
}

/* The EPOCH rows the callback saw; a pause at step sleep_at, a stop at
 * stop_at (0: none). */
typedef struct rows {
    int n;
    vit_epoch_metrics row[32];
    double ips[32];
    unsigned long long sleep_at, stop_at;
    long warmup_steps;
} rows;

static int record(const vit_train_event *ev, void *user)
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
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_selection_test_XXXXXX");
    snprintf(best, sizeof best, "%s/best.ckpt", dir);
    vit_config cfg;
    tiny_config(&cfg, 6);
    cfg.lr = 2e-2; /* a rate that overshoots: the last epoch is not always the best */
    static rows r;
    memset(&r, 0, sizeof r);
    vit_train_result res;
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1, .save_best = VIT_BEST_ACCURACY};
    /* Without a validation set there is nothing to choose by. */
    ck_assert_int_eq(vit_train_run(&cfg, &g_train, &g_test, &o, &res), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "save_best") && strstr(vit_last_error(), "val_count"),
                  "%s", vit_last_error());
    o.val_count = VAL;
    o.on_event = record;
    o.user = &r;
    ck_assert_msg(vit_train_run(&cfg, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
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
    ck_assert_int_eq(vit_run_load(best, &m, NULL, &st), VIT_OK);
    ck_assert_uint_eq(st.epoch, (unsigned long long)want);
    vit_tape *tape = vit_tape_new();
    vit_eval_result ev;
    ck_assert_int_eq(vit_evaluate(m, tape, &g_test, 64, &ev), VIT_OK);
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
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_selection_test_XXXXXX");
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(last_b, sizeof last_b, "%s/last.ckpt", b);
    vit_config cfg;
    tiny_config(&cfg, 12);
    /* A rate too small to move a weight: the validation accuracy of epoch
     * 1 is never beaten, so a patience of 2 ends the run after epoch 3. */
    cfg.lr = 1e-12;
    cfg.min_lr = 0;
    vit_train_result res;
    vit_train_opts o = {.out_dir = a, .ckpt_every = 1, .val_count = VAL, .early_stop = 2};
    ck_assert_msg(vit_train_run(&cfg, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(res.early_stopped, 1);
    ck_assert_int_eq(res.epochs_done, 3);
    ck_assert_int_eq(res.epochs, 12);
    vit_train_result_free(&res);

    /* Stopped after epoch 2 and resumed: the best (epoch 1) is remembered,
     * so the resumed run stops after epoch 3 too, not after epoch 4. */
    o.out_dir = b;
    o.stop_after_epochs = 2;
    ck_assert_int_eq(vit_train_run(&cfg, &g_train, &g_test, &o, &res), VIT_OK);
    ck_assert_int_eq(res.epochs_done, 2);
    vit_train_result_free(&res);
    vit_model *m = NULL;
    vit_run_state st;
    memset(&st, 0, sizeof st);
    ck_assert_int_eq(vit_run_load(last_b, &m, NULL, &st), VIT_OK);
    ck_assert_uint_eq(st.best_epoch, 1);
    ck_assert(st.best_score > 0.05 && st.best_score <= 1);
    vit_model_free(m);
    vit_run_state_free(&st);
    o.stop_after_epochs = 0;
    o.resume = last_b;
    ck_assert_msg(vit_train_run(&cfg, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
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
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_selection_test_XXXXXX");
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", dir);
    vit_config cfg;
    tiny_config(&cfg, 1);
    static rows r;
    memset(&r, 0, sizeof r);
    r.sleep_at = 10; /* 0.4 s spent before the stop at step 20, inside the epoch */
    r.stop_at = 20;
    vit_train_result res;
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1, .on_event = record, .user = &r};
    ck_assert_int_eq(vit_train_run(&cfg, &g_train, &g_test, &o, &res), VIT_OK);
    ck_assert_int_eq(res.interrupted, 1);
    ck_assert(res.run_seconds >= 0.4);
    vit_train_result_free(&res);
    r.sleep_at = r.stop_at = 0;
    o.resume = ckpt;
    ck_assert_msg(vit_train_run(&cfg, &g_train, &g_test, &o, &res) == VIT_OK, "%s",
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
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_selection_test_XXXXXX");
    snprintf(csv, sizeof csv, "%s/metrics.csv", dir);
    vit_config cfg;
    tiny_config(&cfg, 30);
    cfg.lr = 5;
    static rows r;
    memset(&r, 0, sizeof r);
    vit_train_result res;
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1, .on_event = record, .user = &r};
    int rc = vit_train_run(&cfg, &g_train, &g_test, &o, &res);
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
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_selection_test_XXXXXX");
    vit_config cfg;
    tiny_config(&cfg, 28);
    cfg.warmup = 5; /* replaced by a 28th of the run: one epoch */
    static rows r;
    memset(&r, 0, sizeof r);
    vit_train_opts o = {.out_dir = dir, .ckpt_every = 1, .stop_after_epochs = 1,
                        .warmup_fraction = 1 / 28.0, .on_event = record, .user = &r};
    vit_train_result res;
    ck_assert_int_eq(vit_train_run(&cfg, &g_train, &g_test, &o, &res), VIT_OK);
    long spe = (g_train.count + 31) / 32;
    ck_assert_int_eq(r.warmup_steps, spe);
    vit_train_result_free(&res);
    o.warmup_fraction = 1.5;
    o.overwrite = 1;
    ck_assert_int_eq(vit_train_run(&cfg, &g_train, &g_test, &o, &res), VIT_EINVAL);
    fu_remove_tree(dir);
}
END_TEST

static Suite *selection_suite(void)
{
    Suite *s = suite_create("selection");
    TCase *tc = tcase_create("selection");
    tcase_set_timeout(tc, 120);
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
    SRunner *sr = srunner_create(selection_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    vit_dataset_free(&g_train);
    vit_dataset_free(&g_test);
    return failed ? 1 : 0;
}
