/*
 * A training run's time budget (vit_train_opts.budget_seconds): the cost
 * of a step and of scoring measured, the epochs planned to fit, and the
 * plan held after each epoch against the pace the run keeps, shortening or
 * lengthening it with the schedule laid out anew.
 */

#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "trainer_internal.h"
#include "vit/dist.h"

/* Seconds of scoring after each epoch (test and validation sets, one pass)
 * and at the end (with shift9 nine more passes of each, eighteen with
 * shift9flip, and auto's trial of its candidate on one set; the one-pass
 * figures are the last epoch's), at score_seconds per image and pass. */
static double epoch_scoring(const vit_trainer *t)
{
    return (double)(t->test->count + t->val.count) * t->at.score_seconds;
}

/* The final scoring in one-pass scorings of both sets. */
static int final_passes(const vit_trainer *t)
{
    int tta = t->cfg.tta;
    if (tta == VIT_TTA_AUTO) /* the trial, and at worst the test set again */
        return vit_tta_passes(vit_train_auto_tta(&t->cfg));
    return tta == VIT_TTA_NONE ? 0 : vit_tta_passes(tta);
}

static double final_scoring(const vit_trainer *t)
{
    return final_passes(t) * epoch_scoring(t);
}

/* The epochs whose rest costs nearest `left` seconds from here (within
 * half an epoch): the current epoch's remaining steps, whole epochs of spe
 * steps at step seconds each plus `scoring` seconds, and `final` seconds
 * of final scores; at least the epoch after the last done, at most
 * epochs_cap. */
static int epochs_fitting(const vit_trainer *t, double left, double step, double scoring,
                          double final)
{
    long spe = t->at.steps_per_epoch;
    double epoch = (double)spe * step + scoring;
    double n = floor((left - final + (double)t->st.epoch_step * step) / epoch + 0.5);
    double lo = (double)t->st.epoch + 1, hi = t->epochs_cap;
    double e = (double)t->st.epoch + n;
    return (int)(e < lo ? lo : e > hi ? hi : e);
}

/* Times a few forward and backward passes of one batch (the first not
 * counted: caches, tapes) for about 2% of the budget (0.05 .. 2 s), and
 * four one-pass scorings of up to 256 test images (the faster of the last
 * two counted),
 * without training: the model, its gradients' use and the run's random
 * state are as they were.  A data-parallel job takes the ranks' mean. */
static int measure_costs(vit_trainer *t)
{
    const vit_config *c = &t->cfg;
    int b = c->batch < t->train.count ? c->batch : t->train.count, lo, hi, rc = VIT_OK;
    int *idx = malloc((size_t)b * sizeof *idx);
    if (!idx)
        return vit_fail(VIT_ENOMEM, "vit_train_run: out of memory");
    for (int i = 0; i < b; i++)
        idx[i] = i;
    vit_rng saved = t->st.rng; /* the augmentation's draws are given back below */
    vit_train_share(b, &lo, &hi);
    double limit = 0.02 * t->o.budget_seconds, t1 = 0, cost[2] = {0, 0};
    limit = limit < 0.05 ? 0.05 : limit > 2 ? 2 : limit;
    int k;
    for (k = 0; rc == VIT_OK; k++) {
        if (k == 1)
            t1 = now_seconds();
        if (k > 3 && now_seconds() - t1 >= limit)
            break;
        double red[2] = {0, 0};
        rc = vit_train_gather_batch(t, idx, b, lo, hi);
        if (rc == VIT_OK)
            rc = vit_train_local_step(t, hi - lo, red);
    }
    t->st.rng = saved;
    free(idx);
    int all = vit_dist_agree(rc);
    if (all)
        return rc ? rc : vit_fail(all, "the budget's measurement failed on another rank");
    cost[0] = (now_seconds() - t1) / (k - 1) * c->batch / b;
    vit_dataset part = *t->test;
    part.count = part.count < 256 ? part.count : 256;
    /* The first two passes generate kernels and grow the tape (Fashion:
     * 0.85 and 0.67 ms an image, then 0.12 ms); the fastest later one counts. */
    for (int pass = 0; pass < 4 && rc == VIT_OK; pass++) {
        vit_eval_result ev;
        double t2 = now_seconds();
        rc = vit_train_evaluate_shared(t, &part, VIT_TTA_NONE, &ev);
        if (rc == VIT_OK && pass >= 2) {
            double per = (now_seconds() - t2) / part.count;
            if (pass == 2 || per < cost[1])
                cost[1] = per;
        }
        vit_eval_result_free(&ev);
    }
    if (rc || (rc = vit_dist_sum_double(cost, 2)))
        return rc;
    t->at.step_seconds = cost[0] / vit_dist_size();
    t->at.score_seconds = cost[1] / vit_dist_size();
    return VIT_OK;
}

int vit_train_plan_budget(vit_trainer *t)
{
    t->epochs_cap = t->cfg.epochs;
    int rc = measure_costs(t);
    if (rc)
        return rc;
    double el = now_seconds() - t->t0, step = t->at.step_seconds;
    double left = 0.98 * t->o.budget_seconds - el;
    t->cfg.epochs = epochs_fitting(t, left, step, epoch_scoring(t), final_scoring(t));
    vit_train_layout(t);
    long steps = t->at.total_steps - (long)t->st.step;
    t->at.planned_seconds = el + (double)steps * step
                            + (double)(t->cfg.epochs - (long)t->st.epoch) * epoch_scoring(t)
                            + final_scoring(t);
    t->pace_t = now_seconds();
    t->pace_step = t->st.step;
    vit_train_event ev = {.kind = VIT_TRAIN_PLAN, .images_per_second = t->cfg.batch / step};
    vit_train_emit(t, &ev);
    return VIT_OK;
}

int vit_train_hold_budget(vit_trainer *t)
{
    double now = now_seconds(), spe = (double)t->at.steps_per_epoch;
    double done = (double)(t->st.step - t->pace_step) / spe;
    double x[2] = {0, 0};
    /* Short epochs are checked in windows of 3% of the budget at least, as
     * rank 0's clock says. */
    x[0] = vit_dist_rank() == 0 && now - t->pace_t < 0.03 * t->o.budget_seconds;
    int rc = vit_dist_size() > 1 ? vit_dist_sum_double(x, 1) : VIT_OK;
    if (rc || x[0] > 0)
        return rc;
    x[0] = 0;
    if (vit_dist_rank() == 0 && done > 0) {
        x[0] = now - t->t0;
        x[1] = (now - t->pace_t) / done;
    }
    t->pace_t = now;
    t->pace_step = t->st.step;
    rc = vit_dist_size() > 1 ? vit_dist_sum_double(x, 2) : VIT_OK;
    if (rc || done <= 0)
        return rc;
    double el = x[0];
    t->pace = t->pace > 0 ? 0.5 * (t->pace + x[1]) : x[1];
    double per_epoch = t->pace, measured = spe * t->at.step_seconds + epoch_scoring(t);
    double slow = measured > 0 ? per_epoch / measured : 1;
    /* The final scoring as long as this run's own scoring passes take, else
     * as measured at the plan at the pace's slowdown since. */
    double final = final_passes(t) * (t->score_pass > 0 ? t->score_pass
                                                        : epoch_scoring(t) * slow);
    int E = t->cfg.epochs;
    double end = el + (double)(E - (long)t->st.epoch) * per_epoch + final;
    double budget = t->o.budget_seconds;
    if (end <= budget && (end >= 0.92 * budget || E >= t->epochs_cap))
        return VIT_OK;
    /* Shortened to end at 98%, lengthened to 95%: room for the pace to
     * waver without a plan each epoch. */
    double aim = end > budget ? 0.98 : 0.95;
    int want = epochs_fitting(t, aim * budget - el, per_epoch / spe, 0, final);
    if (want == E || (want > E && want < E + 1 + E / 20))
        return VIT_OK; /* a longer run only for a gain worth a new schedule */
    t->cfg.epochs = want;
    vit_train_layout(t);
    t->at.replans++;
    t->at.planned_seconds = el + (double)(want - (long)t->st.epoch) * per_epoch + final;
    vit_train_event ev = {.kind = VIT_TRAIN_PLAN, .images_per_second = t->cfg.batch * spe / per_epoch};
    vit_train_emit(t, &ev);
    return VIT_OK;
}
