/*
 * A training run's time budget (vit_train_opts.budget_seconds), held as a
 * ceiling: the cost of a step, of a one-pass scoring and of the final
 * test-time augmented scoring measured, the epochs planned so that the
 * whole run (the final scoring included) ends under the budget, and the
 * plan held after each epoch against the pace the run keeps: shortened
 * when the pace drops, lengthened early in the run when the pace measured
 * over settled epochs leaves room (budget_plan.c holds the arithmetic).
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "budget_plan.h"
#include "error.h"
#include "trainer_internal.h"
#include "vit/dist.h"

/* Seconds of scoring after each epoch (one pass over the validation set,
 * or without one over the test set) at score_seconds per image. */
static double epoch_scoring(const vit_trainer *t)
{
    return (double)(t->val.count > 0 ? t->val.count : t->test->count) * t->at.score_seconds;
}

/* Seconds of the final scoring as measured at the plan: with a
 * validation set the test set's one pass (the epochs score only the
 * validation set), and the test-time augmented views of the test and
 * validation sets (tta_seconds an image, all views; auto tries its
 * candidate on the validation set, and at worst scores the test set with
 * it; the other one-pass figures are the last epoch's). */
static double final_tta_scoring(const vit_trainer *t)
{
    if (t->tc.tta == VIT_TTA_NONE)
        return 0;
    return (double)(t->test->count + t->val.count) * t->tta_seconds;
}

static double final_scoring(const vit_trainer *t)
{
    double once = t->val.count > 0 ? (double)t->test->count * t->at.score_seconds : 0;
    return once + final_tta_scoring(t);
}

/* The final scoring's cost as the run now goes: the sample's figure at
 * the run's slowdown `slow`.  (Not scaled by the epochs' own one-pass
 * scoring: on the digits that pass costs 3-8 times the sample's figure an
 * image, its fixed costs large beside 360 images, while the tta sample's
 * figure matched the final scoring on Fashion-MNIST.) */
static double final_cost(const vit_trainer *t, double slow)
{
    return final_scoring(t) * slow;
}

/* The plan's arithmetic (budget_plan.h) at the run's position. */
static vit_budget_plan position(const vit_trainer *t, double elapsed, double step, double scoring,
                                double final)
{
    return (vit_budget_plan){.budget = t->o.budget_seconds, .elapsed = elapsed,
                             .steps_per_epoch = t->at.steps_per_epoch,
                             .epoch_step = (long)t->st.epoch_step, .epoch = (int)t->st.epoch,
                             .epochs = t->tc.epochs, .cap = t->epochs_cap, .step = step,
                             .scoring = scoring, .final = final};
}

/* Times forward and backward passes of one batch (the first not counted:
 * caches, tapes) for about 2% of the budget (0.05 .. 2 s; one counted
 * pass at least; when the first alone takes that long, it is counted and
 * the only one, so that a slow model does not spend a short budget on
 * measuring), and
 * four one-pass scorings of up to 256 test images (4 a second of the
 * budget, 16 at least; the faster of the last two counted), and with
 * test-time augmentation the final scoring's views of a quarter as many,
 * without training: the model, its gradients' use and the run's random
 * state are as they were.  A data-parallel job takes the ranks' mean. */
static int measure_costs(vit_trainer *t)
{
    const vit_train_config *tc = &t->tc;
    int b = tc->batch < t->train.count ? tc->batch : t->train.count, lo, hi, rc = VIT_OK;
    int *idx = malloc((size_t)b * sizeof *idx);
    if (!idx)
        return vit_fail(VIT_ENOMEM, "vit_train_run: out of memory");
    for (int i = 0; i < b; i++)
        idx[i] = i;
    vit_rng saved = t->st.rng; /* the augmentation's draws are given back below */
    vit_train_share(b, &lo, &hi);
    double limit = 0.02 * t->o.budget_seconds, t0 = now_seconds(), t1 = 0, cost[3] = {0, 0, 0};
    limit = limit < 0.05 ? 0.05 : limit > 2 ? 2 : limit;
    int k;
    for (k = 0; rc == VIT_OK; k++) {
        if (k == 1 && (t1 = now_seconds()) - t0 >= limit)
            break; /* the first pass alone took the time: it counts, cold (a ceiling) */
        if (k > 1 && now_seconds() - t1 >= limit)
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
    cost[0] = (k == 1 ? t1 - t0 : (now_seconds() - t1) / (k - 1)) * tc->batch / b;
    /* Samples in proportion to a short budget (4 images a second of it,
     * 16 .. 256), so that measuring stays a small part of it. */
    int most = (int)(4 * t->o.budget_seconds);
    most = most < 16 ? 16 : most > 256 ? 256 : most;
    vit_dataset part = *t->test;
    part.count = part.count < most ? part.count : most;
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
    /* The final scoring's views, timed as they run (the second of two
     * passes over up to 64 images: the first builds their buffers). */
    int tta = t->tc.tta == VIT_TTA_AUTO ? vit_train_auto_tta(&t->tc) : t->tc.tta;
    part.count = part.count < most / 4 ? part.count : most / 4;
    for (int pass = 0; pass < 2 && rc == VIT_OK && tta != VIT_TTA_NONE; pass++) {
        vit_eval_result ev;
        double t2 = now_seconds();
        rc = vit_train_evaluate_shared(t, &part, tta, &ev);
        if (rc == VIT_OK)
            cost[2] = (now_seconds() - t2) / part.count;
        vit_eval_result_free(&ev);
    }
    if (rc || (rc = vit_dist_sum_double(cost, 3)))
        return rc;
    t->at.step_seconds = cost[0] / vit_dist_size();
    t->at.score_seconds = cost[1] / vit_dist_size();
    t->tta_seconds = cost[2] / vit_dist_size();
    return VIT_OK;
}

int vit_train_plan_budget(vit_trainer *t)
{
    t->epochs_cap = t->tc.epochs;
    int rc = measure_costs(t);
    if (rc)
        return rc;
    double el = now_seconds() - t->t0, step = t->at.step_seconds;
    double final = VIT_BUDGET_FINAL_MARGIN * final_scoring(t);
    vit_budget_plan p = position(t, el, step, epoch_scoring(t), final);
    t->tc.epochs = vit_budget_fit(&p, VIT_BUDGET_AIM_FIRST);
    vit_train_layout(t);
    t->at.planned_seconds = vit_budget_end(&p, t->tc.epochs);
    t->pace_t = now_seconds();
    t->pace_step = t->st.step;
    vit_train_event ev = {.kind = VIT_TRAIN_PLAN, .images_per_second = t->tc.batch / step};
    vit_train_emit(t, &ev);
    return VIT_OK;
}

/* How much slower the run goes than measured at the plan (1: as fast). */
static double slowdown(const vit_trainer *t, double per_epoch)
{
    double measured = (double)t->at.steps_per_epoch * t->at.step_seconds + epoch_scoring(t);
    double slow = measured > 0 ? per_epoch / measured : 1;
    return slow > 1 ? slow : 1;
}

int vit_train_hold_budget(vit_trainer *t)
{
    double now = now_seconds(), spe = (double)t->at.steps_per_epoch;
    double done = (double)(t->st.step - t->pace_step) / spe;
    double x[2] = {0, 0};
    /* Short epochs are checked in windows of 2% of the budget at least, as
     * rank 0's clock says: a pace, not one epoch's noise. */
    x[0] = vit_dist_rank() == 0 && now - t->pace_t < 0.02 * t->o.budget_seconds;
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
    /* The pace ahead: the last window's, or the mean of it and the pace
     * before when that is slower (one fast epoch does not make a run
     * fast). */
    double mean = t->pace > 0 ? 0.5 * (t->pace + x[1]) : x[1];
    double per_epoch = x[1] > mean ? x[1] : mean;
    t->pace = mean;
    /* The first window ran cold (caches, the tape growing): settled
     * windows are the later ones. */
    if (++t->paces >= 2 && x[1] > t->slow_pace)
        t->slow_pace = x[1];
    double final = VIT_BUDGET_FINAL_MARGIN * final_cost(t, slowdown(t, per_epoch));
    vit_budget_plan p = position(t, el, per_epoch / spe, 0, final);
    p.step_slow = t->slow_pace / spe;
    p.shortened = t->shortened;
    int want = vit_budget_replan(&p, t->paces);
    if (want == t->tc.epochs)
        return VIT_OK; /* kept; or at its least already: the final scoring gives way */
    /* The first window's correction of the measurement does not count. */
    t->shortened |= want < t->tc.epochs && t->paces >= VIT_BUDGET_SETTLED;
    t->tc.epochs = want;
    vit_train_layout(t);
    t->at.replans++;
    t->at.planned_seconds = vit_budget_end(&p, want);
    vit_train_event ev = {.kind = VIT_TRAIN_PLAN, .images_per_second = t->tc.batch * spe / per_epoch};
    vit_train_emit(t, &ev);
    return VIT_OK;
}

int vit_train_final_tta_fits(const vit_trainer *t)
{
    if (t->o.budget_seconds <= 0 || t->tc.tta == VIT_TTA_NONE)
        return 1;
    double x = 0;
    if (vit_dist_rank() == 0) { /* rank 0's clock decides for every rank */
        /* The one-pass figures are done by now: only the views remain. */
        double need = final_tta_scoring(t) * (t->pace > 0 ? slowdown(t, t->pace) : 1);
        x = now_seconds() - t->t0 + VIT_BUDGET_FINAL_MARGIN * need <= t->o.budget_seconds;
    }
    if (vit_dist_size() > 1 && vit_dist_sum_double(&x, 1) != VIT_OK)
        return 0;
    return x > 0;
}

/* Adds part's counts to the running sums of a chunked scoring. */
static void add_part(vit_eval_result *sum, vit_eval_result *part)
{
    if (!sum->confusion) {
        *sum = *part;
        sum->loss *= part->count;
        memset(part, 0, sizeof *part);
        return;
    }
    int k = part->classes;
    for (int i = 0; i < k * k; i++)
        sum->confusion[i] += part->confusion[i];
    sum->loss += part->loss * part->count;
    sum->count += part->count;
    vit_eval_result_free(part);
}

int vit_train_evaluate_timed(vit_trainer *t, const vit_dataset *ds, int tta, vit_eval_result *r,
                             int *gave_up)
{
    *gave_up = 0;
    memset(r, 0, sizeof *r);
    if (t->o.budget_seconds <= 0)
        return vit_train_evaluate_shared(t, ds, tta, r);
    size_t img = (size_t)ds->height * ds->width * ds->channels;
    int chunk = ds->count / 16 > 64 ? ds->count / 16 : 64;
    double t1 = now_seconds();
    for (int at = 0; at < ds->count;) {
        vit_dataset part = *ds;
        part.count = ds->count - at < chunk ? ds->count - at : chunk;
        part.images += (size_t)at * img;
        part.labels += at;
        vit_eval_result e;
        int rc = vit_train_evaluate_shared(t, &part, tta, &e);
        if (rc) {
            vit_eval_result_free(r);
            return rc;
        }
        add_part(r, &e);
        at += part.count;
        /* The rest at this chunk's pace, against the budget (rank 0's). */
        double now = now_seconds(), x = 0;
        x = vit_dist_rank() == 0 && at < ds->count
            && now - t->t0 + (now - t1) / at * (ds->count - at) > t->o.budget_seconds;
        if (vit_dist_size() > 1 && (rc = vit_dist_sum_double(&x, 1))) {
            vit_eval_result_free(r);
            return rc;
        }
        if (x > 0) {
            *gave_up = 1;
            vit_eval_result_free(r);
            memset(r, 0, sizeof *r);
            return VIT_OK;
        }
    }
    int correct = 0;
    for (int k = 0; k < r->classes; k++)
        correct += r->confusion[k * r->classes + k];
    r->loss /= r->count;
    r->accuracy = (double)correct / r->count;
    return VIT_OK;
}

int vit_train_budget_out(const vit_trainer *t)
{
    if (t->o.budget_seconds <= 0 || t->at.step_seconds <= 0)
        return 0;
    double now = now_seconds(), x = 0;
    if (vit_dist_rank() == 0) {
        /* This stretch's pace against the measured one: the slowdown the
         * final one-pass scoring will see too. */
        double steps = (double)(t->st.step - t->pace_step);
        double slow = steps > 0 ? (now - t->pace_t) / steps / t->at.step_seconds : 1;
        slow = slow > 1 ? slow : 1;
        /* The last epoch's one-pass scoring of the sets, a fifth more;
         * before any, twice the small sample's figure: the budget is a
         * ceiling. */
        double scoring = t->score_pass > 0 ? VIT_BUDGET_FINAL_MARGIN * t->score_pass * slow
                                           : 2 * epoch_scoring(t) * slow;
        double step = t->at.step_seconds * slow;
        x = now - t->t0 + step + scoring + 0.02 * t->o.budget_seconds > t->o.budget_seconds;
    }
    if (vit_dist_size() > 1 && vit_dist_sum_double(&x, 1) != VIT_OK)
        return 0;
    return x > 0;
}
