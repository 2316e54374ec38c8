/*
 * The trainer: minibatch steps with augmentation, AdamW with warm-up and
 * cosine decay, per-epoch scoring, OUT/metrics.csv, checkpoints and exact
 * resume, driven step by step (vit_trainer_*) or in one call
 * (vit_train_run).  It reports what happens through the caller's callback
 * and draws nothing: rendering progress for a person is the tools' work.
 */
#include "vit/train.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "train_internal.h"
#include "trainer_internal.h"
#include "vit/dist.h"

void vit_train_emit(vit_trainer *t, vit_train_event *ev)
{
    if (!t->o.on_event || vit_dist_rank() != 0)
        return;
    t->at.elapsed = now_seconds() - t->t0;
    ev->trainer = t;
    ev->at = &t->at;
    if (t->o.on_event(ev, t->o.user))
        atomic_store(&t->stop_asked, 1);
}

/* ---- steps and epochs -------------------------------------------------- */

/* Writes the checkpoint at path (rank 0; the others learn of a failure),
 * with the data order when taken inside an epoch (norder > 0), and for
 * last.ckpt the run's time so far beside it (clock.txt); event
 * CHECKPOINT. */
static int save(vit_trainer *t, int norder, const char *path)
{
    vit_run_state st = t->st;
    st.train_params = t->avg ? vit_model_params(t->m) : NULL;
    st.order = norder ? t->perm : NULL;
    st.norder = norder;
    if (t->class_names) { /* else those of the resumed checkpoint, if any */
        st.class_names = t->class_names;
        st.nclass_names = t->cfg.classes;
    }
    /* The run's config, not the model's copy: a resume may have extended
     * the run (epochs) or changed ckpt_minutes, and a later resume or
     * vit_run_config must see that. */
    int mine = vit_dist_rank() == 0 ? vit_run_internal_save(path, scored(t), &t->cfg, &t->tc,
                                                                  &t->opt, &st)
                                    : VIT_OK;
    if (mine == VIT_OK && vit_dist_rank() == 0 && path == t->ckpt)
        mine = vit_run_clock_write(t->o.out_dir, t->st.step,
                                   t->prior_seconds + now_seconds() - t->t0);
    int rc = vit_dist_agree(mine);
    if (rc && mine == VIT_OK)
        vit_fail(rc, "rank 0 could not write %s", path);
    if (rc)
        return rc;
    t->last_save = now_seconds();
    vit_train_event ev = {.kind = VIT_TRAIN_CHECKPOINT, .path = path};
    vit_train_emit(t, &ev);
    return VIT_OK;
}

/* Between two steps: is a stop asked for (opts.stop, a callback,
 * vit_trainer_request_stop), or a timed checkpoint due?  Any rank's answer
 * is every rank's, so all pause at the same step. */
static int pause_wanted(vit_trainer *t, int *stop, int *rc)
{
    int want[2] = {(t->o.stop && *t->o.stop) || atomic_load(&t->stop_asked),
                   t->tc.ckpt_minutes > 0 && now_seconds() - t->last_save >= 60 * t->tc.ckpt_minutes};
    *rc = vit_dist_size() > 1 ? vit_dist_sum_int(want, 2) : VIT_OK;
    *stop = want[0] > 0;
    return *rc == VIT_OK && (want[0] > 0 || want[1] > 0);
}

/* The optimizer's refusal as the run's error: VIT_ENUM naming the step and
 * whether a gradient was not finite or overflowed when squared. */
static int diverged(vit_trainer *t, int rc)
{
    if (rc != VIT_ENUM && rc != VIT_ERANGE)
        return rc;
    return vit_fail(VIT_ENUM, "training diverged: %s at step %llu (epoch %llu)",
                    rc == VIT_ERANGE ? "overflowing gradient" : "non-finite gradient",
                    t->st.step + 1, t->st.epoch + 1);
}

int vit_train_update(vit_trainer *t, double lr, unsigned long long n)
{
    int ngroups;
    const vit_param_group *groups = vit_model_groups(t->m, &ngroups);
    vit_train_ft_before(t); /* fine-tuning's per-layer lr factors (train_init.c) */
    int rc = vit_adamw_step(&t->opt, vit_model_params(t->m), vit_model_grads(t->m), groups,
                            ngroups, lr);
    if (rc)
        return diverged(t, rc);
    vit_train_ft_after(t);
    if (t->avg)
        rc = vit_ema_update(vit_model_params(t->avg), vit_model_params(t->m),
                            vit_model_param_count(t->m), t->tc.ema, n);
    return rc;
}

/* Step s of the epoch: the minibatch gathered (every rank draws the whole
 * batch's augmentation, so their generators stay equal), each rank's share
 * forward and backward, the gradients summed, the update (vit_train_update)
 * and t->st.step advanced; the epoch's running sums in t->st.  *loss: the batch's mean. */
static int train_batch(vit_trainer *t, long s, double *loss)
{
    const vit_train_config *tc = &t->tc;
    const vit_dataset *train = &t->train;
    int start = (int)(s * tc->batch);
    int b = train->count - start < tc->batch ? train->count - start : tc->batch;
    int lo, hi;
    vit_train_share(b, &lo, &hi);
    double red[2] = {0, 0};
    int mine = vit_train_gather_batch(t, t->perm + start, b, lo, hi);
    mine = vit_train_summed_step(t, mine, hi - lo, b, red);
    int rc = vit_dist_agree(mine);
    if (rc != VIT_OK && mine == VIT_OK)
        return vit_fail(rc, "step %llu failed on another rank", t->st.step + 1);
    if (rc || (rc = vit_dist_sum_double(red, 2)))
        return rc;
    double lv = red[0] / b;
    if (!isfinite(lv))
        return vit_fail(VIT_ENUM, "training diverged: loss is %g at step %llu (epoch %llu)", lv,
                        t->st.step + 1, t->st.epoch + 1);
    double lr = vit_lr_at((long)t->st.step, t->at.total_steps, t->at.warmup_steps, tc->lr,
                          tc->min_lr);
    if ((rc = vit_train_update(t, lr, t->st.step + 1)))
        return rc;
    t->st.step++;
    t->st.epoch_sums[0] += red[0];
    t->st.epoch_sums[1] += red[1];
    t->st.epoch_sums[2] += b;
    t->st.epoch_step = (unsigned long long)s + 1;
    t->lr = lr;
    *loss = lv;
    return VIT_OK;
}

/* An epoch whose mean training loss passes this many times chance's
 * (ln classes) has diverged: a working run starts near 1 and falls. */
#define EXPLODED 10

/* Whether the epoch's validation score beats the best so far (by
 * save_best's measure; accuracy without one).  A resumed best is a
 * float32 figure: a better one must beat it by more than its rounding. */
static int better(const vit_trainer *t, const vit_epoch_metrics *row)
{
    if (t->st.best_epoch == 0)
        return 1;
    double b = t->st.best_score, tol = 1e-6 * (fabs(b) > 1 ? fabs(b) : 1);
    return t->o.save_best == VIT_BEST_LOSS ? row->val_loss < b - tol : row->val_acc > b + tol;
}

/* The epoch's one-pass scores of ds (the test set, or the validation set
 * when there is one) into *r; a VIT_ENUM (a model that diverged in the
 * epoch's last steps, without a NaN loss yet) said as the run's. */
static int score_epoch(vit_trainer *t, const vit_dataset *ds, vit_eval_result *r)
{
    int rc = vit_train_evaluate_shared(t, ds, VIT_TTA_NONE, r);
    if (rc == VIT_ENUM) {
        char why[400];
        snprintf(why, sizeof why, "%s", vit_last_error());
        return vit_fail(VIT_ENUM, "training diverged by step %llu (evaluation after epoch %llu): %s",
                        t->st.step, t->st.epoch, why);
    }
    return rc;
}

/* The end of an epoch: its scores (validation when there is a validation
 * set: the test set is scored once, at the end, on the kept model; else
 * test), the metrics row and event, then the checkpoint it is due (every
 * ckpt_every epochs, the last, a pause). */
static int end_epoch(vit_trainer *t)
{
    const vit_train_opts *o = &t->o;
    vit_epoch_metrics row = {.train_loss = t->st.epoch_sums[0] / t->st.epoch_sums[2],
                             .train_acc = t->st.epoch_sums[1] / t->st.epoch_sums[2],
                             .lr = t->lr, .val_acc = -1, .val_loss = -1,
                             .test_loss = NAN, .test_acc = NAN};
    /* Exploding: no checkpoint of it (the last one is the last good state). */
    double chance = log(t->cfg.classes > 2 ? t->cfg.classes : 2);
    if (!(row.train_loss <= EXPLODED * chance))
        return vit_fail(VIT_ENUM, "training diverged by step %llu: epoch %llu's mean loss is "
                        "%g, over %d times chance's %.3g, at learning rate %g", t->st.step,
                        t->st.epoch + 1, row.train_loss, EXPLODED, chance, t->lr);
    t->last_train_loss = row.train_loss;
    t->st.epoch_step = 0;
    memset(t->st.epoch_sums, 0, sizeof t->st.epoch_sums);
    t->st.epoch++;
    row.epoch = t->st.epoch;
    vit_eval_result_free(&t->last_test);
    double scoring_t0 = now_seconds();
    int rc;
    if (t->val.count > 0) {
        vit_eval_result vr;
        if ((rc = score_epoch(t, &t->val, &vr)))
            return rc;
        t->last_val = row.val_acc = vr.accuracy;
        row.val_loss = vr.loss;
        vit_eval_result_free(&vr);
    } else if ((rc = score_epoch(t, t->test, &t->last_test))) {
        return rc;
    } else {
        row.test_loss = t->last_test.loss;
        row.test_acc = t->last_test.accuracy;
    }
    if (o->check_replicas && !vit_dist_same(vit_train_params_hash(t->m)))
        return vit_fail(VIT_EINVAL, "replicas diverged: parameters differ between ranks after "
                        "epoch %llu", t->st.epoch);
    t->score_pass = now_seconds() - scoring_t0; /* the budget's guide to the final scoring */
    row.seconds = t->prior_seconds + now_seconds() - t->t0;
    if (vit_dist_rank() == 0
        && (rc = vit_metrics_append(t->metrics, t->metrics_path, &row, t->val.count > 0)))
        return rc;
    unsigned long long ep = t->st.epoch;
    t->at.epoch = ep;
    t->at.epoch_step = 0;
    t->at.finished = ep >= (unsigned long long)t->tc.epochs
                     || (o->stop_after_epochs > 0 && ep >= (unsigned long long)o->stop_after_epochs);
    int improved = t->val.count > 0 && better(t, &row);
    if (improved) {
        t->st.best_epoch = ep;
        t->st.best_score = t->o.save_best == VIT_BEST_LOSS ? row.val_loss : row.val_acc;
    }
    if (t->o.early_stop > 0 && !t->at.finished
        && ep - t->st.best_epoch >= (unsigned long long)t->o.early_stop) {
        t->at.finished = 1;
        t->early_stopped = 1;
    }
    vit_train_event ev = {.kind = VIT_TRAIN_EPOCH, .epoch = &row,
                          .images_per_second = (double)ep * t->train.count / row.seconds};
    vit_train_emit(t, &ev);
    if (improved && t->o.save_best != VIT_BEST_NONE && (rc = save(t, 0, t->best_path)))
        return rc;
    if (o->budget_seconds > 0 && !t->at.finished && (rc = vit_train_hold_budget(t, 0)))
        return rc;
    int last = ep == (unsigned long long)t->tc.epochs || t->early_stopped
               || (o->stop_after_epochs > 0 && ep == (unsigned long long)o->stop_after_epochs);
    int stop = 0, pause = pause_wanted(t, &stop, &rc);
    if (rc)
        return rc;
    if ((o->ckpt_every > 0 && (ep % (unsigned long long)o->ckpt_every == 0 || last)) || pause)
        if ((rc = save(t, 0, t->ckpt)))
            return rc;
    t->at.stopped = stop;
    return VIT_OK;
}

/* 1 when a budget's plan ends inside this epoch (VIT_PLAN_PARTIAL) and
 * the steps it laid the cosine over are done. */
static int laid_out_end(const vit_trainer *t)
{
    return t->at.plan_cut == VIT_PLAN_PARTIAL
           && t->st.step >= (unsigned long long)t->at.total_steps;
}

/* One step and what follows it: the event, a pause inside the epoch, or
 * the epoch's end. */
static int step_once(vit_trainer *t)
{
    long spe = t->at.steps_per_epoch;
    long s = (long)t->st.epoch_step;
    if (s == 0) { /* a new epoch; else t->perm holds the checkpoint's order */
        for (int i = 0; i < t->train.count; i++)
            t->perm[i] = i;
        vit_rng_shuffle(&t->st.rng, t->perm, t->train.count);
    }
    double loss = 0;
    int rc = train_batch(t, s, &loss);
    if (rc)
        return rc;
    t->at.step = t->st.step;
    t->at.epoch_step = t->st.epoch_step;
    double el = now_seconds() - t->t0;
    double steps = (double)(t->st.step - t->at.start_step);
    vit_train_event ev = {.kind = VIT_TRAIN_STEP, .loss = loss, .lr = t->lr,
                          .images_per_second = steps * t->tc.batch / (el > 1e-9 ? el : 1e-9)};
    vit_train_emit(t, &ev);
    if (s + 1 == spe)
        return end_epoch(t);
    int out = vit_train_budget_out(t);
    if (!out && laid_out_end(t)) {
        /* The steps a plan ending inside this epoch laid its cosine over
         * are done: at the pace now (a first measurement's cold step may
         * have said too few) more may fit, and the plan follows it. */
        if ((rc = vit_train_hold_budget(t, 2)))
            return rc;
        out = laid_out_end(t);
    }
    if (out) {
        /* Not even this epoch fits: the run ends at this step (the time's
         * backstop, or the end of the steps the plan laid its cosine
         * over), its position checkpointed (a resume goes on from it),
         * and the final figures score this model. */
        if ((rc = save(t, t->train.count, t->ckpt)))
            return rc;
        vit_eval_result_free(&t->last_test);
        t->last_val = -1;
        t->out_of_budget = 1;
        t->at.finished = 1;
        return VIT_OK;
    }
    /* A plan of one or two epochs is held between the first one's steps
     * too: no epoch's end could lengthen it (the second's is past its
     * cosine's middle), so a first measurement that was slow (a cold
     * step under load: 628 img/s measured, 959 run, 1 epoch in 1.5 s of
     * 6) would leave most of the budget unused.  The plan's last two
     * epochs are held too: a slowdown there (another job starting) would
     * else leave the backstop to cut the run short of its cosine's end
     * (an ASan run at 0.00012 of 0.002); held, the plan ends inside an
     * epoch with its cosine laid out to the steps that fit. */
    if (t->o.budget_seconds > 0
        && t->st.epoch + 2 >= (unsigned long long)t->tc.epochs /* the last two (all of 1-2) */
        && (rc = vit_train_hold_budget(t, 1)))
        return rc;
    int stop = 0;
    if (pause_wanted(t, &stop, &rc)) {
        if ((rc = save(t, t->train.count, t->ckpt)))
            return rc;
        t->at.stopped = stop;
    }
    return rc;
}

/* ---- the public calls ---------------------------------------------------- */

int vit_trainer_step(vit_trainer *t)
{
    if (!t)
        return vit_fail(VIT_EINVAL, "vit_trainer_step: NULL trainer");
    if (t->failed)
        return vit_fail(t->failed, "vit_trainer_step: the run failed earlier (%s)",
                        vit_status_name(t->failed));
    if (t->at.finished || t->at.stopped)
        return vit_fail(VIT_EINVAL, "vit_trainer_step: the run is %s",
                        t->at.stopped ? "stopped" : "finished");
    int rc = step_once(t);
    t->failed = rc;
    return rc;
}

int vit_trainer_epoch(vit_trainer *t)
{
    int rc;
    do
        rc = vit_trainer_step(t);
    while (rc == VIT_OK && !t->at.stopped && t->at.epoch_step != 0);
    return rc;
}

const vit_train_progress *vit_trainer_progress(const vit_trainer *t) { return t ? &t->at : NULL; }

const vit_config *vit_trainer_config(const vit_trainer *t) { return t ? &t->cfg : NULL; }

const vit_train_config *vit_trainer_train_config(const vit_trainer *t) { return t ? &t->tc : NULL; }

vit_model *vit_trainer_model(vit_trainer *t) { return t ? scored(t) : NULL; }

void vit_trainer_request_stop(vit_trainer *t)
{
    if (t)
        atomic_store(&t->stop_asked, 1);
}

int vit_trainer_checkpoint(vit_trainer *t)
{
    if (!t)
        return vit_fail(VIT_EINVAL, "vit_trainer_checkpoint: NULL trainer");
    return save(t, t->st.epoch_step > 0 ? t->train.count : 0, t->ckpt);
}

int vit_trainer_evaluate(vit_trainer *t, const vit_dataset *ds, int tta, vit_eval_result *r)
{
    if (!t || !ds || !r)
        return vit_fail(VIT_EINVAL, "vit_trainer_evaluate: NULL argument");
    int rc = vit_check_data_shape(&t->cfg, ds, "evaluation");
    return rc ? rc : vit_train_evaluate_shared(t, ds, tta, r);
}

void vit_train_result_free(vit_train_result *r)
{
    if (!r)
        return;
    free(r->confusion);
    r->confusion = NULL;
}

/* tta = auto: the candidate (shift9, or shift9flip for a model trained with
 * flips: vit_train_auto_tta) is used only if it beats one pass (val_plain)
 * on the validation set; without one, one pass is kept and its test figure
 * goes beside it.  *tta gets the choice. */
static int choose_tta(vit_trainer *t, double val_plain, int *tta, vit_train_result *res)
{
    vit_eval_result e = {0};
    int rc, candidate = vit_train_auto_tta(&t->tc);
    res->tta_auto = 1;
    *tta = VIT_TTA_NONE;
    int gave_up = 0;
    if (t->val.count > 0) {
        if ((rc = vit_train_evaluate_timed(t, &t->val, candidate, &e, &gave_up)) == VIT_OK
            && !gave_up) {
            res->val_accuracy_tta = e.accuracy;
            *tta = e.accuracy > val_plain ? candidate : VIT_TTA_NONE;
        }
    } else if ((rc = vit_train_evaluate_timed(t, t->test, candidate, &e, &gave_up)) == VIT_OK
               && !gave_up)
        res->test_accuracy_tta = e.accuracy;
    if (gave_up)
        res->tta_skipped = VIT_TTA_AUTO;
    vit_eval_result_free(&e);
    return rc;
}

/* The final figures of the kept model: one pass (the test set's as the
 * last epoch's row, when this invocation scored one; with a validation
 * set the test set is scored here, once), and then, with test-time
 * augmentation, the classifier's own, which the result reports first
 * (tta = auto: choose_tta decides which). */
static int final_scores(vit_trainer *t, vit_train_result *res)
{
    vit_eval_result ev = t->last_test;
    memset(&t->last_test, 0, sizeof t->last_test);
    int rc = ev.confusion ? VIT_OK : vit_train_evaluate_shared(t, t->test, VIT_TTA_NONE, &ev);
    double val_acc = t->last_val;
    if (rc == VIT_OK && t->val.count > 0 && val_acc < 0) {
        vit_eval_result vr = {0};
        if ((rc = vit_train_evaluate_shared(t, &t->val, VIT_TTA_NONE, &vr)) == VIT_OK)
            val_acc = vr.accuracy;
        vit_eval_result_free(&vr);
    }
    res->test_accuracy_plain = ev.accuracy;
    res->test_loss_plain = ev.loss;
    res->val_accuracy_plain = val_acc;
    res->val_accuracy = val_acc;
    res->val_accuracy_tta = res->test_accuracy_tta = -1;
    int tta = t->tc.tta;
    if (tta != VIT_TTA_NONE && !vit_train_final_tta_fits(t)) { /* a budget's ceiling */
        res->tta_skipped = tta;
        tta = VIT_TTA_NONE;
    }
    if (rc == VIT_OK && tta == VIT_TTA_AUTO)
        rc = choose_tta(t, val_acc, &tta, res);
    res->tta = tta;
    if (rc == VIT_OK && tta != VIT_TTA_NONE) {
        /* Under a budget a scoring that would pass it is given up: then
         * every figure stays one pass. */
        vit_eval_result et = {0}, vr = {0};
        int gave_up = 0;
        rc = vit_train_evaluate_timed(t, t->test, tta, &et, &gave_up);
        if (rc == VIT_OK && !gave_up && t->val.count > 0 && !res->tta_auto)
            rc = vit_train_evaluate_timed(t, &t->val, tta, &vr, &gave_up);
        if (rc == VIT_OK && gave_up) {
            res->tta_skipped = res->tta_auto ? VIT_TTA_AUTO : tta;
            res->tta = VIT_TTA_NONE;
        } else if (rc == VIT_OK) {
            vit_eval_result_free(&ev);
            ev = et;
            memset(&et, 0, sizeof et);
            if (t->val.count > 0)
                res->val_accuracy = res->tta_auto ? res->val_accuracy_tta : vr.accuracy;
        }
        vit_eval_result_free(&et);
        vit_eval_result_free(&vr);
    }
    if (rc == VIT_OK) {
        res->test_accuracy = ev.accuracy;
        res->test_loss = ev.loss;
        res->confusion = ev.confusion;
        res->confusion_classes = ev.classes;
        ev.confusion = NULL;
    }
    vit_eval_result_free(&ev);
    return rc;
}

/* save_best: the model the final figures score is the best one (its
 * checkpoint, unless that is the last epoch's), put in place of the
 * scored weights; training is over, and last.ckpt keeps the last ones. */
static int take_best(vit_trainer *t, vit_train_result *res)
{
    res->best_epoch = (int)t->st.best_epoch;
    res->best_score = t->st.best_score;
    if (t->st.best_epoch == 0 || t->st.best_epoch == t->st.epoch)
        return VIT_OK;
    vit_model *b = NULL;
    int rc = vit_run_load(t->best_path, &b, NULL, NULL, NULL);
    if (rc == VIT_OK && vit_model_param_count(b) != vit_model_param_count(scored(t)))
        rc = vit_fail(VIT_EFORMAT, "%s: not this run's model", t->best_path);
    if (rc == VIT_OK)
        memcpy(vit_model_params(scored(t)), vit_model_params(b),
               vit_model_param_count(b) * sizeof(vit_real));
    vit_model_free(b);
    vit_eval_result_free(&t->last_test); /* the last epoch's: scored anew */
    t->last_val = -1;
    return vit_dist_agree(rc);
}

int vit_trainer_fit(vit_trainer *t, vit_train_result *res)
{
    if (!t || !res)
        return vit_fail(VIT_EINVAL, "vit_trainer_fit: NULL argument");
    memset(res, 0, sizeof *res);
    res->val_accuracy = -1;
    res->steps_per_epoch = t->at.steps_per_epoch;
    res->tta = t->tc.tta;
    res->val_accuracy_tta = res->test_accuracy_tta = -1;
    res->ema = t->tc.ema;
    int rc = VIT_OK;
    while (rc == VIT_OK && !t->at.finished && !t->at.stopped)
        rc = vit_trainer_step(t);
    if (rc)
        return rc;
    res->epochs_done = (int)t->st.epoch;
    res->epochs = t->tc.epochs;
    res->steps = t->st.step;
    if (t->complete_at_start) {
        res->already_complete = 1;
        return VIT_OK;
    }
    res->early_stopped = t->early_stopped;
    if ((res->out_of_budget = t->out_of_budget))
        res->epoch_step = t->st.epoch_step;
    if (t->at.stopped) {
        res->interrupted = 1;
        res->epoch_step = t->st.epoch_step;
        res->seconds = now_seconds() - t->t0;
        res->run_seconds = t->prior_seconds + res->seconds;
        return VIT_OK;
    }
    if (t->o.save_best != VIT_BEST_NONE && (rc = take_best(t, res)))
        return rc;
    if ((rc = final_scores(t, res)))
        return rc;
    /* The run's time up to its final figures (final.csv says it: the time
     * to that accuracy). */
    res->seconds = now_seconds() - t->t0;
    res->run_seconds = t->prior_seconds + res->seconds;
    /* The figures just reported, beside metrics.csv (which holds one-pass
     * figures per epoch). */
    rc = vit_dist_rank() == 0 ? vit_metrics_write_final(t->o.out_dir, res, t->last_train_loss)
                              : VIT_OK;
    if ((rc = vit_dist_agree(rc)))
        return rc;
    /* This invocation's images: a resume inside an epoch did only its rest. */
    double images = (double)(t->st.epoch - t->at.start_epoch) * t->train.count
                    + (double)t->st.epoch_step * t->tc.batch
                    - (double)t->start_epoch_step * t->tc.batch;
    res->images_per_second = images / res->seconds;
    double partial = (double)t->st.epoch_step * t->tc.batch; /* out of budget */
    res->run_images_per_second = ((double)t->st.epoch * t->train.count + partial) / res->run_seconds;
    return VIT_OK;
}

int vit_train_run(const vit_config *cfg, const vit_train_config *tc, const vit_dataset *train,
                  const vit_dataset *test, const vit_train_opts *o, vit_train_result *res)
{
    if (!res)
        return vit_fail(VIT_EINVAL, "vit_train_run: NULL argument");
    memset(res, 0, sizeof *res);
    res->val_accuracy = -1;
    vit_trainer *t;
    int rc = vit_trainer_new(&t, cfg, tc, train, test, o);
    if (rc == VIT_OK)
        rc = vit_trainer_fit(t, res);
    vit_trainer_free(t);
    return rc;
}
