/*
 * A training run's time budget (vit_train_opts.budget_seconds), held as a
 * ceiling: the cost of a whole training step (forward, backward and the
 * optimizer's update), of a one-pass scoring and of the final test-time
 * augmented scoring measured, the epochs planned so that the whole run
 * (the final scoring included) ends under the budget, and the plan held
 * after each epoch against the pace the run keeps (every cost of its
 * epochs, over settled windows): shortened when that pace says the run
 * would pass the ceiling, lengthened early in the run when it leaves room
 * beyond its measured spread (budget_plan.c holds the arithmetic).
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "budget_plan.h"
#include "error.h"
#include "trainer_internal.h"
#include "vit/dist.h"

/* The backstops between steps and in the final scoring keep this much
 * more than their figure's cost: they act at the very end, where a pace
 * that wavers has nothing left to absorb it. */
#define BACKSTOP_MARGIN 1.2

/* Seconds after each epoch's steps: its scoring (one pass over the
 * validation set, or without one over the test set) at score_seconds per
 * image, and its share of a checkpoint (one every ckpt_every epochs). */
static double epoch_pass(const vit_trainer *t)
{
    return (double)(t->val.count > 0 ? t->val.count : t->test->count) * t->at.score_seconds;
}

static double epoch_scoring(const vit_trainer *t)
{
    return epoch_pass(t) + (t->o.ckpt_every > 0 ? t->ckpt_seconds / t->o.ckpt_every : 0);
}

/* Seconds of writing a checkpoint: rank 0 writes this run's as it stands
 * to OUT/last.ckpt.budget-probe (not when that name is taken: a user's
 * file is never overwritten) and removes it; 0 when it cannot. */
static double time_checkpoint(vit_trainer *t)
{
    char path[sizeof t->ckpt + 16];
    struct stat sb;
    if (vit_dist_rank() != 0 || t->o.ckpt_every <= 0
        || snprintf(path, sizeof path, "%s.budget-probe", t->ckpt) >= (int)sizeof path
        || stat(path, &sb) == 0)
        return 0;
    vit_run_state st = t->st;
    st.train_params = t->avg ? vit_model_params(t->m) : NULL;
    double t0 = now_seconds();
    int rc = vit_run_internal_save(path, scored(t), &t->cfg, &t->tc, &t->opt, &st);
    double s = now_seconds() - t0;
    remove(path);
    return rc == VIT_OK ? s : 0;
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

static double final_once(const vit_trainer *t)
{
    return t->val.count > 0 ? (double)t->test->count * t->at.score_seconds : 0;
}

/* The plan's arithmetic (budget_plan.h) at the run's position: the final
 * scoring's one pass `once` and its test-time augmented views `tta`. */
static vit_budget_plan position(const vit_trainer *t, double elapsed, double step, double scoring,
                                double once, double tta)
{
    return (vit_budget_plan){.budget = t->o.budget_seconds, .elapsed = elapsed,
                             .steps_per_epoch = t->at.steps_per_epoch,
                             .epoch_step = (long)t->st.epoch_step, .epoch = (int)t->st.epoch,
                             .epochs = t->tc.epochs, .cap = t->epochs_cap, .step = step,
                             .scoring = scoring, .final = once + tta, .tta = tta};
}

/* A training step's state that the measuring passes' optimizer updates
 * change, kept to be put back: the parameters, AdamW's moments and count,
 * the average.  NULL (no update timed) when memory is short. */
typedef struct saved_state {
    vit_real *p, *m, *v, *avg;
    uint64_t t;
} saved_state;

static void state_free(saved_state *s)
{
    free(s->p);
    free(s->m);
    free(s->v);
    free(s->avg);
}

static int state_save(vit_trainer *t, saved_state *s)
{
    size_t n = vit_model_param_count(t->m), z = n * sizeof(vit_real);
    memset(s, 0, sizeof *s);
    s->p = malloc(z);
    s->m = malloc(z);
    s->v = malloc(z);
    s->avg = t->avg ? malloc(z) : NULL;
    if (!s->p || !s->m || !s->v || (t->avg && !s->avg)) {
        state_free(s);
        memset(s, 0, sizeof *s);
        return 0;
    }
    memcpy(s->p, vit_model_params(t->m), z);
    memcpy(s->m, t->opt.m, z);
    memcpy(s->v, t->opt.v, z);
    if (t->avg)
        memcpy(s->avg, vit_model_params(t->avg), z);
    s->t = t->opt.t;
    return 1;
}

static void state_restore(vit_trainer *t, saved_state *s)
{
    size_t z = vit_model_param_count(t->m) * sizeof(vit_real);
    memcpy(vit_model_params(t->m), s->p, z);
    memcpy(t->opt.m, s->m, z);
    memcpy(t->opt.v, s->v, z);
    if (t->avg)
        memcpy(vit_model_params(t->avg), s->avg, z);
    t->opt.t = s->t;
    state_free(s);
}

/* One measured training step as train.c's train_batch takes it, the
 * update included (vit_train_update, at learning rate 0: the caller puts
 * the state back).  The average as of update 2 at least: the first one
 * copies the weights, where every later one blends them (optim.c). */
static int measured_step(vit_trainer *t, const int *idx, int b, int lo, int hi, int update)
{
    double red[2] = {0, 0};
    int rc = vit_train_gather_batch(t, idx, b, lo, hi);
    if (rc == VIT_OK)
        rc = vit_train_local_step(t, hi - lo, red);
    return rc || !update ? rc : vit_train_update(t, 0, t->st.step + 2);
}

/* Seconds an image of up to n passes scoring part with tta, into x[2]:
 * the last two of those from pass `skip` on (the earlier ones warm up),
 * and when the clock passes `until` (rank 0's, for every rank: each pass
 * is collective) after a pass before those two are done, the last one
 * twice (warmer than the first, no warmer than a counted one). */
static int timed_passes(vit_trainer *t, const vit_dataset *part, int tta, int n, int skip,
                        double until, double x[2])
{
    double fig[8] = {0};
    int done = 0, rc = VIT_OK;
    while (done < n && rc == VIT_OK) {
        vit_eval_result ev;
        double t2 = now_seconds();
        rc = vit_train_evaluate_shared(t, part, tta, &ev);
        vit_eval_result_free(&ev);
        fig[done++] = (now_seconds() - t2) / part->count;
        double late = vit_dist_rank() == 0 && now_seconds() > until;
        if (rc == VIT_OK && vit_dist_size() > 1)
            rc = vit_dist_sum_double(&late, 1);
        if (late > 0)
            break;
    }
    x[0] = fig[done - 1];
    x[1] = done >= 2 && done - 2 >= skip ? fig[done - 2] : fig[done - 1];
    return rc;
}

/* Times whole training steps, each of a new batch scattered over the
 * training set as a shuffled epoch's are, the optimizer's update and the average
 * included (the first not counted: caches, tapes), for about 2% of the
 * budget (0.05 .. 2 s; one counted pass at least; when the first alone
 * takes that long, it is counted and the only one, so that a slow model
 * does not spend a short budget on measuring), and four one-pass scorings
 * of up to 256 test images (4 a second of the budget, 16 at least; the
 * mean of the last two counted), and with test-time augmentation the
 * final scoring's views of a quarter as many (three passes: the first
 * builds their buffers; the mean of the other two counts, and the slower
 * one's excess over it is the final scoring's margin); the scorings stop
 * early, counting their cold passes, once they pass 5% of the budget, and the writing of a checkpoint,
 * without training: the model, the optimizer, the average and the run's
 * random state are put back.  A data-parallel job takes the ranks'
 * mean. */
static int measure_costs(vit_trainer *t)
{
    const vit_train_config *tc = &t->tc;
    int b = tc->batch < t->train.count ? tc->batch : t->train.count, lo, hi, rc = VIT_OK;
    int *idx = malloc((size_t)b * sizeof *idx);
    if (!idx)
        return vit_fail(VIT_ENOMEM, "vit_train_run: out of memory");
    /* A stride prime to the set's size (and no divisor of it): each pass's
     * b images distinct and spread over it, as a shuffled batch's are, and
     * each pass a new batch, as in an epoch (one batch again and again
     * stayed in the cache, which an epoch's gathering never is). */
    long stride = 7919;
    while (t->train.count % stride == 0)
        stride += 2;
    vit_rng saved = t->st.rng; /* the augmentation's draws are given back below */
    saved_state keep;
    int update = state_save(t, &keep);
    vit_train_share(b, &lo, &hi);
    double limit = 0.02 * t->o.budget_seconds, t0 = now_seconds(), t1 = 0, cost[4] = {0, 0, 0, 0};
    limit = limit < 0.05 ? 0.05 : limit > 2 ? 2 : limit;
    int k;
    for (k = 0; rc == VIT_OK; k++) {
        if (k == 1 && (t1 = now_seconds()) - t0 >= limit)
            break; /* the first pass alone took the time: it counts, cold (a ceiling) */
        if (k > 1 && now_seconds() - t1 >= limit)
            break;
        for (int i = 0; i < b; i++)
            idx[i] = (int)((((long)k * b + i) % t->train.count * stride) % t->train.count);
        rc = measured_step(t, idx, b, lo, hi, update);
    }
    if (update)
        state_restore(t, &keep);
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
     * 0.85 and 0.67 ms an image, then 0.12 ms); the later ones count. */
    double until = now_seconds() + 0.05 * t->o.budget_seconds, once[2], views[2] = {0, 0};
    rc = timed_passes(t, &part, VIT_TTA_NONE, 4, 2, until, once);
    cost[1] = 0.5 * (once[0] + once[1]);
    int tta = t->tc.tta == VIT_TTA_AUTO ? vit_train_auto_tta(&t->tc) : t->tc.tta;
    part.count = part.count < most / 4 ? part.count : most / 4;
    if (rc == VIT_OK && tta != VIT_TTA_NONE)
        rc = timed_passes(t, &part, tta, 3, 1, until, views);
    cost[2] = 0.5 * (views[0] + views[1]);
    cost[3] = cost[2] > 0 ? (views[0] > views[1] ? views[0] : views[1]) / cost[2] : 1;
    if (rc)
        return rc;
    double ckpt = time_checkpoint(t); /* rank 0's, for every rank */
    if ((rc = vit_dist_sum_double(cost, 4)))
        return rc;
    if (vit_dist_size() > 1 && (rc = vit_dist_sum_double(&ckpt, 1)))
        return rc;
    t->ckpt_seconds = ckpt;
    t->at.step_seconds = cost[0] / vit_dist_size();
    t->at.score_seconds = cost[1] / vit_dist_size();
    t->tta_seconds = cost[2] / vit_dist_size();
    t->final_margin = cost[3] / vit_dist_size();
    return VIT_OK;
}

/* What the backstop between steps keeps of the budget after a step, at
 * slowdown slow: the checkpoint written at the cut and the one-pass
 * scoring after it (pass, the last epoch's, a fifth more; before one,
 * pass 0: twice the sample's figure), and 2% of the budget. */
static double backstop_reserve(const vit_trainer *t, double pass, double slow)
{
    double scoring = pass > 0 ? BACKSTOP_MARGIN * pass * slow : 2 * epoch_pass(t) * slow;
    scoring += t->ckpt_seconds * slow;
    return scoring + 0.02 * t->o.budget_seconds;
}

/* The steps from p's position that end before the backstop between steps
 * would end the run (vit_train_budget_out's reserve: the checkpoint at the
 * cut, the one-pass scoring that follows, 2% of the budget) at p's pace,
 * two steps short of it; at least one.  Rank 0's scoring time, so that
 * every rank counts alike (a collective call). */
static long steps_to_backstop(const vit_trainer *t, const vit_budget_plan *p)
{
    double slow = p->step > t->at.step_seconds && t->at.step_seconds > 0
                      ? p->step / t->at.step_seconds : 1;
    double pass = vit_dist_rank() == 0 ? t->score_pass : 0;
    if (vit_dist_size() > 1 && vit_dist_sum_double(&pass, 1) != VIT_OK)
        pass = 0; /* a failed sum fails the next collective too: the run ends there */
    double left = t->o.budget_seconds - p->elapsed - backstop_reserve(t, pass, slow);
    if (!(p->step > 0))
        return 1;
    /* Whole epochs first, each with its scoring at its end; then the
     * steps of the one the run ends inside. */
    long n = 0, spe = p->steps_per_epoch, k = spe - p->epoch_step;
    while (left >= (double)k * p->step + p->scoring && n < (long)p->cap * spe) {
        left -= (double)k * p->step + p->scoring;
        n += k;
        k = spe;
    }
    n += (long)floor(left / p->step) - 2;
    return n > 1 ? n : 1;
}

/* The steps p's plan of t->tc.epochs still has. */
static long steps_needed(const vit_trainer *t, const vit_budget_plan *p)
{
    return (long)(t->tc.epochs - p->epoch) * t->at.steps_per_epoch - p->epoch_step;
}

/* A plan that ends inside its last epoch (VIT_PLAN_PARTIAL: its end past
 * the budget, vit_budget_cut) has its cosine laid out to reach min_lr at
 * the steps that fit before the backstop (the run ends there, train.c's
 * step_once, or at the backstop if slower), the final scoring one pass.
 * Any other is left as vit_train_layout laid it. */
static void lay_partial(vit_trainer *t, const vit_budget_plan *p)
{
    if (t->at.plan_cut != VIT_PLAN_PARTIAL) /* the same on every rank */
        return;
    long n = steps_to_backstop(t, p);
    if (steps_needed(t, p) <= n)
        return;
    long total = (long)t->st.step + n, warm = t->at.warmup_steps;
    t->at.total_steps = total;
    t->at.warmup_steps = warm < total / 10 ? warm : total / 10;
    double end = p->elapsed + (double)n * p->step + (p->final - p->tta);
    t->at.planned_seconds = end < p->budget ? end : p->budget;
}

/* The plan as tc's epochs, the schedule laid out and event PLAN: without
 * the views (views 0: vit_budget_choose left them out), or when even the
 * least plan passes the budget, the final test-time augmented scoring
 * gives way (one pass), or the epoch under way is cut too (the run will
 * end inside it); planned_seconds never passes the budget. */
static void set_plan(vit_trainer *t, vit_budget_plan *p, int epochs, int views, double ips)
{
    t->tc.epochs = epochs;
    vit_train_layout(t);
    double end;
    /* The library's codes are the public ones (train.h). */
    _Static_assert((int)VIT_BUDGET_CUT_TTA == (int)VIT_PLAN_NO_TTA
                       && (int)VIT_BUDGET_CUT_EPOCH == (int)VIT_PLAN_PARTIAL,
                   "plan_cut's values");
    t->at.plan_cut = vit_budget_cut(p, epochs, views, &end);
    t->at.planned_seconds = end;
    lay_partial(t, p);
    vit_train_event ev = {.kind = VIT_TRAIN_PLAN, .images_per_second = ips};
    vit_train_emit(t, &ev);
}

int vit_train_plan_budget(vit_trainer *t)
{
    t->epochs_cap = t->tc.epochs;
    int rc = measure_costs(t);
    if (rc)
        return rc;
    double el = now_seconds() - t->t0, step = t->at.step_seconds;
    double tta = t->final_margin * final_tta_scoring(t);
    vit_budget_plan p = position(t, el, step, epoch_scoring(t), final_once(t), tta);
    int views, epochs = vit_budget_choose(&p, VIT_BUDGET_AIM_FIRST, &views);
    set_plan(t, &p, epochs, views, t->tc.batch / step);
    t->pace_t = now_seconds();
    t->pace_step = t->st.step;
    return VIT_OK;
}

/* How much slower a step goes, every epoch cost included, than the plan's
 * measurement said (1: as fast). */
static double slowdown(const vit_trainer *t, double step)
{
    double spe = (double)t->at.steps_per_epoch;
    double measured = spe * t->at.step_seconds + epoch_scoring(t);
    double slow = measured > 0 ? step * spe / measured : 1;
    return slow > 1 ? slow : 1;
}

/* The final scoring's margin as the run goes: the sample's at the plan,
 * times the settled pace's own spread. */
static double final_margin(const vit_trainer *t)
{
    double step = vit_budget_pace_step(&t->pace), spread = vit_budget_pace_spread(&t->pace);
    double m = t->final_margin > 1 ? t->final_margin : 1;
    return step > 0 ? m * (1 + spread / step) : m;
}

int vit_train_hold_budget(vit_trainer *t, int inside)
{
    double now = now_seconds();
    double x[3] = {0, 0, 0};
    /* Short epochs are checked in windows of 2% of the budget at least, as
     * rank 0's clock says: a pace, not one epoch's noise. */
    x[0] = vit_dist_rank() == 0 && inside != 2 && now - t->pace_t < 0.02 * t->o.budget_seconds;
    int rc = vit_dist_size() > 1 ? vit_dist_sum_double(x, 1) : VIT_OK;
    if (rc || x[0] > 0)
        return rc;
    x[0] = 0;
    if (vit_dist_rank() == 0) {
        x[0] = now - t->t0;
        x[1] = (double)(t->st.step - t->pace_step);
        x[2] = now - t->pace_t;
    }
    t->pace_t = now;
    t->pace_step = t->st.step;
    rc = vit_dist_size() > 1 ? vit_dist_sum_double(x, 3) : VIT_OK;
    if (rc || x[1] <= 0)
        return rc;
    /* The window's every cost (steps, scoring, the checkpoint before it)
     * as seconds a step; the plan's pace is the settled one. */
    vit_budget_pace_add(&t->pace, x[1], x[2]);
    double step = vit_budget_pace_step(&t->pace);
    double slow = slowdown(t, step), margin = final_margin(t);
    double tta = margin * final_tta_scoring(t) * slow;
    /* A window inside an epoch is its steps alone: the epochs' scoring
     * and checkpoints as measured, at the steps' slowdown. */
    double scoring = inside ? epoch_scoring(t) * (step > t->at.step_seconds
                                                  ? step / t->at.step_seconds : 1) : 0;
    vit_budget_plan p = position(t, x[0], step, scoring, final_once(t) * slow * margin, tta);
    p.spread = vit_budget_pace_spread(&t->pace);
    int had = t->at.plan_cut == VIT_PLAN_WHOLE, views = had;
    int want = vit_budget_replan(&p, t->pace.windows - 1, &views);
    if (want == t->tc.epochs && views == had) {
        /* Kept (or at its least already: the final scoring gives way).
         * A plan ending inside its epoch follows the pace to its cut,
         * quietly; one that comes to end inside it, or no longer does, is
         * a new plan. */
        double end;
        int was = t->at.plan_cut == VIT_PLAN_PARTIAL;
        int is = vit_budget_cut(&p, want, views, &end) == VIT_BUDGET_CUT_EPOCH;
        if (!was && !is)
            return VIT_OK;
        if (was && is) {
            vit_train_layout(t);
            lay_partial(t, &p);
            return VIT_OK;
        }
    }
    t->at.replans++;
    set_plan(t, &p, want, views, t->tc.batch / step);
    return VIT_OK;
}

int vit_train_final_tta_fits(const vit_trainer *t)
{
    if (t->o.budget_seconds <= 0 || t->tc.tta == VIT_TTA_NONE)
        return 1;
    double x = 0;
    if (vit_dist_rank() == 0) { /* rank 0's clock decides for every rank */
        /* The one-pass figures are done by now: only the views remain. */
        double step = vit_budget_pace_step(&t->pace);
        double need = final_tta_scoring(t) * (step > 0 ? slowdown(t, step) : 1);
        x = now_seconds() - t->t0 + final_margin(t) * need <= t->o.budget_seconds;
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
        /* The checkpoint written here and the scoring after it: the
         * budget is a ceiling. */
        double step = t->at.step_seconds * slow;
        x = now - t->t0 + step + backstop_reserve(t, t->score_pass, slow) > t->o.budget_seconds;
    }
    if (vit_dist_size() > 1 && vit_dist_sum_double(&x, 1) != VIT_OK)
        return 0;
    return x > 0;
}
